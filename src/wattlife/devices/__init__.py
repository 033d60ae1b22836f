"""Everything that touches hardware: NVML, RAPL, the CPU estimate, the simulated GPU, power caps.

Each sensor backend has the same interface (`SensorBackend`): `poll(now_ns)` returns trace rows
`(t_ns, device, metric, value, source)`, `info()` describes it for `meta.json`.
"""
