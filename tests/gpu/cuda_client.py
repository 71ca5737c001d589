"""A CUDA program for the GPU checks (run by the test's own interpreter, with PyTorch):
prints what the device looks like from inside (JSON on one line), multiplies two matrices,
tries to allocate argv[1] bytes, then waits for the file argv[2] (so several run at once)."""

from __future__ import annotations

import json
import math
import os
import sys
import time

import torch

free, total = torch.cuda.mem_get_info()
x = torch.randn(2048, 2048, device="cuda")
checksum = float((x @ x).sum().item())
torch.cuda.synchronize()
try:
    block = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device="cuda")
    big = "allocated"
    del block
except torch.OutOfMemoryError:
    big = "refused"
props = torch.cuda.get_device_properties(0)
seen = {
    "pid": os.getpid(),
    "devices": torch.cuda.device_count(),
    "name": props.name,
    "sms": props.multi_processor_count,
    "mem_total": total,
    "mem_free": free,
    "big_allocation": big,
    "checksum_finite": math.isfinite(checksum),
    "env": {k: v for k, v in os.environ.items() if k.startswith(("CUDA_", "NVIDIA_"))},
}
print("SEEN", json.dumps(seen), flush=True)
deadline = time.monotonic() + 120
while len(sys.argv) > 2 and not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
    time.sleep(0.05)
