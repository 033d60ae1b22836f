"""Pure analysis: tables in, tables out. Nothing here imports torch or NVML."""
