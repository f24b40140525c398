"""Issue 31's data loader with PyTorch's own DataLoader (the GPU lane, benchmarks/gpu_check.py: torch is not
installed where the suite runs): a Dataset of N small dicts (a path string and two ints each) read through a
DataLoader with 4 persistent forked workers for 2 epochs, sample by sample, then a rest. Nothing imports
memgap. A worker's reads write the reference counts of its parent's objects, so each page of them it reads
becomes its own copy (pytorch/pytorch#13246).

    python torch_loader.py [N] [REST]    # N dicts (1,000,000 by default), REST seconds of rest (3)

Each worker prints "read PID" once it has read its share of the first epoch.
"""
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
REST = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
WORKERS = 4


class Files(Dataset):
    def __init__(self, n: int) -> None:
        self.rows = [{"path": f"/srv/data/{i % 997}/part-{i:07d}.bin", "size": i * 7 + 1_000_003,
                      "mtime": 1_700_000_000 + i} for i in range(n)]
        self.read = 0  # in each worker, its own count (the object is the worker's copy)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> int:
        row = self.rows[i]
        self.read += 1
        if self.read == len(self.rows) // WORKERS and get_worker_info() is not None:
            os.write(1, f"read {os.getpid()}\n".encode())
        return row["size"] + row["mtime"] + len(row["path"])


if __name__ == "__main__":
    loader = DataLoader(Files(N), batch_size=1024, shuffle=True, num_workers=WORKERS, persistent_workers=True,
                        multiprocessing_context="fork")
    total = 0
    for _ in range(2):
        for batch in loader:
            total += int(torch.as_tensor(batch).sum()) % 1000
    print(f"epochs done {total}", flush=True)
    time.sleep(REST)  # the persistent workers rest with the parent
