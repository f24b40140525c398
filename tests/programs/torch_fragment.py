"""A fragmenting loop on a GPU (issue 33), for the device lane (benchmarks/gpu_check.py; the suite never runs
it: it needs torch and a CUDA device). It does not import memgap.

Each round allocates TENSORS tensors of 12-84 MiB in a varied order (each one filled, so the GPU works), keeps
one in three and frees the rest; a round first drops the older half of what the rounds before kept, leaving
holes of varied sizes in PyTorch's cache for the next round's tensors to split. Then it prints its rate,
``steps_per_s N`` (the lab's --metric-regex), its step time and its cache's figures (torch.cuda.memory_stats()),
and rests REST seconds holding what it kept, so that a lab finds its idle in a quiet spell.

    FRAG_ROUNDS=4 FRAG_TENSORS=200 FRAG_REST=3 python tests/programs/torch_fragment.py
"""
import os
import time

import torch

ROUNDS = int(os.environ.get("FRAG_ROUNDS", "4"))
TENSORS = int(os.environ.get("FRAG_TENSORS", "200"))
REST = float(os.environ.get("FRAG_REST", "3"))
MiB = 1 << 20


def main() -> None:
    torch.ones(1, device="cuda")  # the CUDA context, before the clock starts
    kept: list[torch.Tensor] = []
    steps, began = 0, time.perf_counter()
    for r in range(ROUNDS):
        kept = kept[len(kept) // 2:]
        for i in range(TENSORS):
            t = torch.empty((12 + (i * 37 + r * 11) % 73) * MiB, dtype=torch.uint8, device="cuda")
            t.fill_(1)
            if i % 3 == 0:
                kept.append(t)
            del t
            steps += 1
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - began
    stats = torch.cuda.memory_stats()
    print(f"steps_per_s {steps / elapsed:.1f}", flush=True)
    print(f"step_ms {1000 * elapsed / steps:.3f} allocated {stats['allocated_bytes.all.current']} reserved "
          f"{stats['reserved_bytes.all.current']} inactive_split {stats['inactive_split_bytes.all.current']} "
          f"conf {os.environ.get('PYTORCH_ALLOC_CONF', '')!r}", flush=True)
    time.sleep(REST)


if __name__ == "__main__":
    main()
