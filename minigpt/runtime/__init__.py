"""Where and how computation runs: device and precision, torchrun and DDP, cores, memory, FLOPs and peaks."""
