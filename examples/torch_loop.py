"""A plain PyTorch training loop with wattlife's phase markers: the smallest own script.

    wattlife run -- python examples/torch_loop.py [--steps 40] [--batch 128]

Each step is `step(items=batch)`: the items give energy per item (J/item) and throughput
(items/s); inside it the per-step phases data_load, h2d, forward, backward and optimizer. Runs on
the GPU when there is one, else the CPU; random data, no downloads. Without `wattlife run` the
markers do nothing.
"""

import argparse

import torch
from torch import nn

from wattlife.markers import phase, step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40, help="training steps (default 40)")
    ap.add_argument("--batch", type=int, default=128, help="items per step (default 128)")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    with phase("model_load"):
        model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(args.steps):
        with step(items=args.batch):
            with phase("data_load"):
                x, y = torch.randn(args.batch, 256), torch.randint(0, 10, (args.batch,))
            with phase("h2d"):
                x, y = x.to(device), y.to(device)
            with phase("forward"):
                loss = nn.functional.cross_entropy(model(x), y)
            with phase("backward"):
                loss.backward()
            with phase("optimizer"):
                opt.step()
                opt.zero_grad()
    print(f"last loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
