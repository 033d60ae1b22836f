"""Power-cap sweeps: `simulated` (the simulated GPU model, tables in and out), `real` (a command
run under the sampler at each cap set by the power-cap controller) and `pfi_matrix` (a PFI-study
cell of the config → its workload and hardware profile)."""
