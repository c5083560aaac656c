"""tricks' child: seconds from creating an optimizer to the end of its first step, in a fresh process.

python first_step.py minigpt|fused     minigpt's AdamW, or torch.optim.AdamW(fused=True)
"""

import sys
import time

import torch

t = time.perf_counter()
p = torch.nn.Parameter(torch.randn(100, 100))
p.grad = torch.randn(100, 100)
if sys.argv[1] == "minigpt":
    from minigpt.training.optim import AdamW

    opt = AdamW([{"params": [p], "weight_decay": 0.1}], lr=1e-3, betas=(0.9, 0.99))
else:
    opt = torch.optim.AdamW([p], lr=1e-3, fused=True)
opt.step()
print(time.perf_counter() - t)
