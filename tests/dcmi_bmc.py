"""A BMC answering DCMI's Get Power Reading over IPMI 2.0 (lanplus) on loopback, for the node
power tests: pyghmi's IPMI server (`pyghmi.ipmi.bmc.Bmc`: sessions, RAKP authentication, AES)
with a handler for DCMI (netfn 0x2C, command 0x02, DCMI 1.5 section 6.6.1), which OpenIPMI's
ipmi_sim lacks. The current power follows node_emulators' schedule from T0; `--inactive` answers
"power measurement not active" (bit 6 of the state byte clear).

    python tests/dcmi_bmc.py PORT USER PASSWORD T0_NS READY_FILE [--inactive]

Run as a child of the test (tests/conftest.py `children`), which ends it.
"""

import struct
import sys
import time
from pathlib import Path

import pyghmi.ipmi.bmc as bmc

sys.path.insert(0, str(Path(__file__).parent))
import node_emulators as emu  # noqa: E402

DCMI_NETFN, GET_POWER_READING, GROUP_DCMI = 0x2C, 0x02, 0xDC


class DcmiBmc(bmc.Bmc):  # type: ignore[misc]
    """pyghmi's BMC plus DCMI Get Power Reading (every other command: pyghmi's answer)."""

    def __init__(self, t0: int, active: bool, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.t0, self.active = t0, active

    def handle_raw_request(self, request, session):
        if request["netfn"] == DCMI_NETFN and request["command"] == GET_POWER_READING:
            w = int(emu.power_at(emu._now(), self.t0))
            data = struct.pack("<BHHHHIIB", GROUP_DCMI, w, int(emu.LOW_W), int(emu.HIGH_W), w,
                               int(time.time()), 1000, 0x40 if self.active else 0x00)
            return session.send_ipmi_response(data=list(data))
        return super().handle_raw_request(request, session)


def main() -> None:
    port, user, password, t0, ready = sys.argv[1:6]
    server = DcmiBmc(int(t0), "--inactive" not in sys.argv, {user: password}, port=int(port),
                     address="127.0.0.1")
    Path(ready).write_text("listening\n")  # the socket is bound once the server exists
    server.listen()


if __name__ == "__main__":
    main()
