"""Interop cases for full (consolidated) checkpoints, registered by run_interop.py.

(e) shardckpt writes one safetensors file and Hugging Face shards from a DCP checkpoint, both by
    streaming and by N ranks with sck_save_full; full_check.py reads them with numpy and torch.
    Then the HF directory (several files) is the source: shardckpt converts it back to DCP and
    torch's DCP loads that on 2 ranks.  Values saved by torch survive the trip in __metadata__.
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def add_cases(s, ri):
    """s: the Suite; ri: the run_interop module (run, CLI, PY)."""
    run, cli, py = ri.run, ri.CLI, ri.PY
    check = os.path.join(HERE, "full_check.py")
    ref = s.p("ref.safetensors")

    def single(ranks):
        out = s.p(f"full{ranks or ''}.safetensors")
        extra = ["--ranks", str(ranks)] if ranks else []
        run([cli, "convert", s.p("ck"), out, "--to", "safetensors"] + extra)
        return run([py, check, out, ref])

    def hf():
        run([cli, "convert", s.p("ck"), s.p("hf"), "--to", "hf", "--max-shard-size", "100B", "--ranks", "2"])
        out = run([py, check, s.p("hf"), ref, "--max-shard", "100"])
        if " in 1 file" in out:
            raise ri.Failure(f"expected several shards with a 100-byte cap:\n{out}")
        return out

    def hf_to_dcp_torch_loads():
        run([cli, "convert", s.p("hf"), s.p("ck_from_hf"), "--to", "dcp", "--ranks", "3"])
        return run([py, os.path.join(HERE, "torch_load_check.py"), s.p("ck_from_hf"), ref])

    def diff_all():
        out = run([cli, "diff", s.p("ck"), s.p("hf")])
        out += run([cli, "diff", ref, s.p("ck_from_hf")])
        return out

    if s.case("(e) shardckpt DCP -> one safetensors file, streamed: numpy + torch read it, bit-identical",
              lambda: single(0)):
        s.case("(e) the same written by 3 ranks in place (sck_save_full)", lambda: single(3))
        if s.case("(e) Hugging Face shards (100-byte cap) by 2 ranks: index, names, caps, numpy + torch",
                  hf):
            if s.case("(e) HF dir (several files) -> DCP on 3 ranks; torch loads it on 2 ranks",
                      hf_to_dcp_torch_loads):
                s.case("(e) shardckpt diff: DCP vs HF and safetensors vs DCP are identical", diff_all)


def add_torch_cases(s, ri):
    """Cases that need torch's own reference checkpoint (s.p('ckt'))."""
    check = os.path.join(HERE, "full_check.py")

    def torch_values(ranks):
        out = s.p(f"torch_full{ranks}.safetensors")
        ri.run([ri.CLI, "convert", s.p("ckt"), out, "--to", "safetensors", "--ranks", str(ranks)])
        return ri.run([ri.PY, check, out, s.p("ckt", "expected.safetensors"),
                       "--values", s.p("ckt", "expected_values.json")])

    def hf_model_export():
        """model.* of torch's DCP (beside optim.* and values) -> HF under the stripped names."""
        import json
        import npst
        out = s.p("hf_model")
        ri.run([ri.CLI, "convert", s.p("ckt"), out, "--to", "hf", "--include", "model.*", "--strip-prefix", "model.",
                "--max-shard-size", "200B"])
        expected, _ = npst.read(s.p("ckt", "expected.safetensors"))
        want = {k[len("model."):]: v for k, v in expected.items() if k.startswith("model.")}
        with open(os.path.join(out, "model.safetensors.index.json")) as f:
            index = json.load(f)
        problems = []
        if set(index["weight_map"]) != set(want):
            problems.append(f"index names {sorted(index['weight_map'])}, want {sorted(want)}")
        got = {}
        for fname in sorted(set(index["weight_map"].values())):
            tensors, md = npst.read(os.path.join(out, fname))
            got.update(tensors)
            if md != {"format": "pt"}:
                problems.append(f"{fname}: __metadata__ {md}, want only format=pt (values are not model.*)")
        if set(got) != set(want):
            problems.append(f"files hold {sorted(got)}, want {sorted(want)}")
        problems += [f"{k}: not bit-identical" for k in want if k in got and not npst.same_bits(want[k], got[k])]
        # a second export into it is refused without --force
        again = ri.run_fail([ri.CLI, "convert", s.p("ckt"), out, "--to", "hf"])
        if "pass --force" not in again:
            problems.append(f"second convert without --force: {again}")
        s.expect_no_problems(problems)
        return f"{len(got)} tensors in {len(set(index['weight_map'].values()))} files: {sorted(got)}"

    s.case("(e) torch's DCP -> full safetensors by 2 ranks: tensors + values in __metadata__",
           lambda: torch_values(2))
    s.case("(e) convert --to hf --include 'model.*' --strip-prefix model.: exactly the model, renamed, bit-identical",
           hf_model_export)
