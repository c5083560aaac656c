"""Where and how computation runs: device and precision (device), torchrun and DDP (distributed),
the cores a process may use (cores), memory figures (memory) and FLOPs and peaks (mfu)."""
