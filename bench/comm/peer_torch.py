"""bench/comm's peer side: one rank of the same sweep as comm_bench.cpp over torch.distributed's gloo
backend (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the environment), printing the same JSON lines
with "side": "torch" from rank 0. reduce_scatter is reduce_scatter_tensor and allgather
all_gather_into_tensor where this torch's gloo has them; older torch (Debian's 1.13) has neither on gloo,
so there allgather is all_gather into a list of views and reduce_scatter is all_reduce of the whole input
("impl" says which ran)."""
import argparse, json, sys, time

import torch
import torch.distributed as dist


def make_call(op, nbytes, ranks):
    elems = nbytes // 4
    if op == "allreduce":
        x = torch.ones(elems)
        return "all_reduce", lambda: dist.all_reduce(x)
    if op == "broadcast":
        x = torch.ones(elems)
        return "broadcast", lambda: dist.broadcast(x, 0)
    if op == "allgather":
        x, out = torch.ones(elems // ranks), torch.zeros(elems)
        try:
            dist.all_gather_into_tensor(out, x)
            return "all_gather_into_tensor", lambda: dist.all_gather_into_tensor(out, x)
        except (AttributeError, RuntimeError):
            views = list(out.chunk(ranks))
            return "all_gather", lambda: dist.all_gather(views, x)
    if op == "reduce_scatter":
        x, out = torch.ones(elems), torch.zeros(elems // ranks)
        try:
            dist.reduce_scatter_tensor(out, x)
            return "reduce_scatter_tensor", lambda: dist.reduce_scatter_tensor(out, x)
        except (AttributeError, RuntimeError):
            return "all_reduce (gloo has no reduce_scatter)", lambda: dist.all_reduce(x)
    sys.exit(f"peer_torch: unknown op {op}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ops", default="allreduce,reduce_scatter,allgather,broadcast")
    p.add_argument("--min-bytes", type=int, default=1024)
    p.add_argument("--max-bytes", type=int, default=256 << 20)
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--budget-bytes", type=int, default=512 << 20)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, ranks = dist.get_rank(), dist.get_world_size()
    for op in a.ops.split(","):
        nbytes = a.min_bytes
        while nbytes <= a.max_bytes:
            impl, call = make_call(op, nbytes, ranks)
            iters = min(max(a.budget_bytes // nbytes, 3), 100)
            for _ in range(2):
                call()
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                call()
            seconds = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
            dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
            if rank == 0:
                print(json.dumps({"side": "torch", "op": op, "ranks": ranks, "bytes": nbytes, "iters": iters,
                                  "time_us": seconds.item() / iters * 1e6, "impl": impl,
                                  "torch": torch.__version__}), flush=True)
            nbytes *= a.factor
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
