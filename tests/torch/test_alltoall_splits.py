"""all_to_all_single with input and output split sizes, as a mixture of
experts' dispatcher calls it: the per-expert counts exchanged first (an
all_to_all_single of equal blocks), then the token rows with the splits
those counts give, then back the other way. Uneven splits with zeros,
ranks that send or receive nothing at all, a whole call that moves nothing,
rows of several columns; float32 and bfloat16 against what each rank knows
every rank's input to be."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def body(rank, size, check):
    import torch
    import torch.distributed as dist
    import weft.torch  # noqa: F401
    dist.init_process_group("weft", init_method="env://")

    def rows(i, j, case):
        # rows rank i sends rank j: uneven, zeros on the diagonal of case 1,
        # rank 0 sends nothing in case 2, nobody receives on rank 1 in case 3
        if case == 0:
            return (3 * i + j) % 4
        if case == 1:
            return 0 if i == j else i + 2 * j
        if case == 2:
            return 0 if i == 0 else (i * j) % 3 + 1
        return 0 if j == 1 or size == 1 else (i + j) % 2 + 1

    def value(i, j, k, c, case):
        # small integers: exact in bfloat16
        return float((i * 7 + j * 3 + k + c + case) % 50)

    for dt in (torch.float32, torch.bfloat16):
        for case in range(4):
            cols = 1 + case % 3
            ins = [rows(rank, j, case) for j in range(size)]
            # the counts go first, as a dispatcher's do
            cnt = torch.tensor(ins, dtype=torch.int64)
            got = torch.zeros(size, dtype=torch.int64)
            dist.all_to_all_single(got, cnt)
            outs = [rows(i, rank, case) for i in range(size)]
            check(f"counts case {case}", got.tolist() == outs, f"{got.tolist()} vs {outs}")
            x = torch.cat([torch.tensor([[value(rank, j, k, c, case) for c in range(cols)]
                                         for k in range(ins[j])], dtype=dt).reshape(ins[j], cols)
                           for j in range(size)])
            y = torch.full((sum(outs), cols), -1.0, dtype=dt)
            dist.all_to_all_single(y, x, output_split_sizes=got.tolist(), input_split_sizes=ins)
            want = torch.cat([torch.tensor([[value(i, rank, k, c, case) for c in range(cols)]
                                            for k in range(outs[i])], dtype=dt).reshape(outs[i], cols)
                              for i in range(size)])
            name = f"{str(dt)[6:]} case {case} ({sum(ins)} rows out, {sum(outs)} in)"
            check(f"dispatch {name}", torch.equal(y, want), f"{y} vs {want}")
            # and back (the combine): the splits swap
            back = torch.full_like(x, -1.0)
            w = dist.all_to_all_single(back, y, output_split_sizes=ins,
                                       input_split_sizes=got.tolist(), async_op=True)
            w.wait()
            check(f"combine {name}", torch.equal(back, x))
    # a call that moves nothing on any rank
    e = torch.zeros((0, 4), dtype=torch.bfloat16)
    f = torch.zeros((0, 4), dtype=torch.bfloat16)
    dist.all_to_all_single(f, e, output_split_sizes=[0] * size, input_split_sizes=[0] * size)
    check("all zero splits", f.numel() == 0)
    dist.destroy_process_group()


if __name__ == "__main__":
    harness.main(body, sizes=(2, 4))
