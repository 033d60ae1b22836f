"""The order of the cells within a round of repeats (issue 40, design): a seeded permutation per
round (`jobs.round_orders`), each cell's place (`jobs.cell_positions`) recorded in its meta.json
through `wattlife measure --order`, the config key `execution.order_seed` (schema default 0)."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wattlife.cli.custody import _order
from wattlife.config import load_config
from wattlife.config import settings as typed
from wattlife.custody.measure import cell_command
from wattlife.errors import InputError
from wattlife.jobs import cell_positions, cell_slice, round_orders


def _rounds(n_cells: int, n_rounds: int) -> dict[int, list[str]]:
    return {r: [f"w/local/ckpt-c{i}/r{r}" for i in range(n_cells)]
            for r in range(1, n_rounds + 1)}


def _perm(order: list[str]) -> list[str]:
    return [c.rsplit("/", 1)[0] for c in order]  # the cells, without their repeat


@settings(max_examples=60, deadline=None)
@given(n_cells=st.integers(1, 9), n_rounds=st.integers(1, 6), seed=st.integers(0, 2**31))
def test_each_round_is_a_seeded_permutation_of_its_cells_unlike_the_round_before(
        n_cells, n_rounds, seed):
    rounds = _rounds(n_cells, n_rounds)
    orders = round_orders(rounds, seed)
    assert sorted(orders) == sorted(rounds)
    for r, order in orders.items():
        assert sorted(order) == sorted(rounds[r]) and len(set(order)) == n_cells
    assert round_orders(rounds, seed) == orders  # the seed alone gives it again
    if n_cells >= 2:
        for r in range(2, n_rounds + 1):
            assert _perm(orders[r]) != _perm(orders[r - 1]), (r, orders)


def test_seeds_give_different_orders_and_not_snakemakes_sorted_one():
    rounds = _rounds(6, 3)
    by_seed = [tuple(tuple(o) for o in round_orders(rounds, s).values()) for s in range(8)]
    assert len(set(by_seed)) == 8
    assert any(o != sorted(o) for o in round_orders(rounds, 0).values())
    # pinned: a seed recorded in a result gives its order again on any later run
    assert _perm(round_orders(rounds, 0)[1]) == [f"w/local/ckpt-c{i}" for i in (5, 1, 2, 0, 4, 3)]


def test_cell_positions_number_each_round_from_1_and_say_the_seed():
    cells = [(c, r) for r, ids in _rounds(3, 2).items() for c in ids]
    pos = cell_positions(cells, 7, enforced=True)
    for r in (1, 2):
        got = sorted(pos[c]["round_position"] for c, rr in cells if rr == r)
        assert got == [1, 2, 3]
    assert {(p["round_cells"], p["order_seed"], p["order_enforced"]) for p in pos.values()} == {
        (3, 7, True)}
    none = cell_positions(cells, None, enforced=True)
    assert {json.dumps(p, sort_keys=True) for p in none.values()} == {json.dumps(
        {"order_enforced": False, "order_seed": None, "round_cells": 3, "round_position": None},
        sort_keys=True)}


def test_order_seed_is_a_typed_key_with_the_schemas_default_and_no_part_of_a_cells_slice():
    cfg = load_config("config/config.yaml")
    assert typed(cfg).execution.order_seed == 0
    cfg["execution"]["order_seed"] = 5
    assert typed(cfg).execution.order_seed == 5
    assert "order_seed" not in cell_slice(cfg, "resnet", "local", "off", 1)["execution"]


def test_measure_records_the_cells_place_in_meta_jsons_cell(tmp_path):
    cfg = load_config(".test/config/config.yaml")
    place = cell_positions([("resnet/local/ckpt-off/r1", 1)], 4)["resnet/local/ckpt-off/r1"]
    cmd = cell_command(cell_slice(cfg, "resnet", "local", "off", 1), "resnet/local/ckpt-off/r1",
                       tmp_path, place)
    cell = json.loads(cmd.split("--cell ")[1].split(" --")[0].strip("'"))
    assert cell == {"workload": "resnet", "storage": "local", "checkpoint": "off", "repeat": "1",
                    "round_position": 1, "round_cells": 1, "order_seed": 4,
                    "order_enforced": False}
    assert _order(json.dumps(place)) == place
    with pytest.raises(InputError, match="--order .*expected exactly the keys"):
        _order('{"round_position": 1}')
    with pytest.raises(InputError, match="--order: expected the cell's place"):
        _order("1/3")
