"""``dtbook plan``: the command line on your own model (config.json) and hardware (a YAML or
JSON file), every bad input a one-line error, the constraint that left no layout named, the
enumeration bounded by the model rather than by --gpus, and ties ordered by memory."""

import argparse
import importlib
import inspect
import io
import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest

from dtbook import hardware, models, plan
from dtbook.plan import cli

search_mod = importlib.import_module("dtbook.plan.search")

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
         "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
         "num_hidden_layers": 32, "vocab_size": 128256, "max_position_embeddings": 8192,
         "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
         "hidden_act": "silu", "torch_dtype": "bfloat16", "attention_bias": False,
         "mlp_bias": False}
MIXTRAL = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
           "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
           "num_hidden_layers": 32, "vocab_size": 32000, "max_position_embeddings": 32768,
           "rms_norm_eps": 1e-5, "rope_theta": 1e6, "tie_word_embeddings": False,
           "hidden_act": "silu", "num_local_experts": 8, "num_experts_per_tok": 2,
           "sliding_window": None, "torch_dtype": "bfloat16"}


def run(*argv):
    """main(argv) in-process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def refused(*argv):
    """Bad input: status 2 and one line (argparse's own message, or ours) naming it."""
    try:
        code, out, err = run(*argv)
    except SystemExit as stop:          # argparse: usage, then 'error: argument --x: ...'
        return stop.code, ""
    assert code == 2 and out == "" and "Traceback" not in err
    return code, err


def rows(text):
    return [line for line in text.splitlines() if line.split() and line.split()[0].isdigit()]


@pytest.fixture
def config_file(tmp_path):
    def write(data, name="config.json"):
        path = tmp_path / name
        path.write_text(json.dumps(data))
        return str(path)
    return write


@pytest.fixture(autouse=True)
def _no_registration_left():
    yield
    for name in hardware.registered():
        hardware.unregister(name)


# --------------------------------------------------------------------------- your own model
@pytest.mark.parametrize("data, catalog", [(LLAMA, "llama3-8b"), (MIXTRAL, "mixtral-8x7b")])
def test_config_json_plans_like_the_catalog_model(config_file, data, catalog):
    # two routes to the same model: the published config.json, and the catalog's entry
    assert models.from_hf_config(config_file(data)).num_params() == models.get(catalog).num_params()
    args = ("--gpus", "64", "--batch", "512", "--seq", "4096", "--top", "5")
    code, out, err = run("--config", config_file(data), *args)
    assert code == 0 and err == ""
    assert rows(out) == rows(run(catalog, *args)[1]) and len(rows(out)) == 5
    if models.get(catalog).is_moe:
        assert any(int(r.split()[4]) > 1 for r in rows(out))      # the ep column is searched


def test_config_with_a_stand_in_reader(config_file, monkeypatch):
    # the CLI's side alone: whatever from_hf_config returns is what it plans
    seen = []

    def reader(source):
        seen.append(source)
        return models.get("llama3-8b")
    monkeypatch.setattr(models, "from_hf_config", reader)
    path = config_file({"anything": 1})
    assert run("--config", path, "--gpus", "8", "--batch", "8", "--seq", "2048")[0] == 0
    assert seen == [path]


def test_bad_config_is_named(config_file, tmp_path):
    broken = dict(LLAMA)
    del broken["num_hidden_layers"]
    code, err = refused("--config", config_file(broken), "--gpus", "8", "--batch", "8", "--seq", "2048")
    assert "--config" in err and "num_hidden_layers" in err
    assert "--config" in refused("--config", str(tmp_path / "absent.json"), "--gpus", "8",
                                 "--batch", "8", "--seq", "2048")[1]
    both = refused("llama3-8b", "--config", config_file(LLAMA), "--gpus", "8", "--batch", "8", "--seq", "2048")
    assert "not both" in both[1]
    assert "give a model" in refused("--gpus", "8", "--batch", "8", "--seq", "2048")[1]
    assert "unknown model 'llama9'" in refused("llama9", "--gpus", "8", "--batch", "8", "--seq", "2048")[1]


# --------------------------------------------------------------------------- your own hardware
def _h100_copy(name="my-h100"):
    """The catalog's H100 SXM written as a file would hold it: figures with units."""
    h = hardware.get("h100-sxm")
    mm, mm8 = hardware.matmul_ceiling("h100-sxm"), hardware.matmul_ceiling("h100-sxm", "fp8")
    mem, att = hardware.memory_ceiling("h100-sxm"), hardware.attention_kernel("h100-sxm")
    up, out = hardware.get("nvlink4"), hardware.get("ib-ndr400")
    return {
        "accelerator": {
            "name": name, "source": "a copy of the catalog's H100 SXM, for a test",
            "peak_flops": {d: f"{v / 1e12!r} TFLOP/s" for d, v in h.peak_flops.items()},
            "hbm_bytes": "80 GiB", "hbm_bandwidth": f"{h.hbm_bandwidth / 1e12!r} TB/s",
            "matmul_ceiling": {"bf16": mm.flops, "fp8": mm8.flops, "sms": mm.sms},
            "memory_ceiling": {"triad": mem.triad, "copy": mem.copy},
            "attention_kernel": {"forward": att.forward, "backward": att.backward}},
        # nvlink4 by name: its protocol efficiency is the catalog's (published busbw rows)
        "links": [{"name": name + "-ib", "alpha": f"{out.alpha * 1e6!r} us", "beta": "50 GB/s"}],
        "node": {"name": name + "-node", "gpus": 8, "scale_up": up.name, "scale_out": name + "-ib"},
    }


def test_register_makes_an_accelerator_the_planner_accepts():
    acc = hardware.register(_h100_copy())
    assert hardware.get("MY_H100") is acc and acc.hbm_bytes == 80 * 2**30
    assert "my-h100" in hardware.plannable() and hardware.node("my-h100-node").gpus == 8
    kw = dict(gpus=64, tp=4, pp=2, dp=8, global_batch=512, seq=4096)
    mine, catalog = plan.estimate("llama3-8b", gpu="my-h100", **kw), plan.estimate("llama3-8b", **kw)
    # ib-ndr400's protocol efficiency (a published busbw row) does not reach a new link name
    assert mine.memory_per_gpu == catalog.memory_per_gpu and mine.fits == catalog.fits
    assert mine.breakdown["compute"] == pytest.approx(catalog.breakdown["compute"])
    hardware.unregister("my-h100")
    assert hardware.accelerators() == ["a100-80gb", "h100-sxm", "h200", "h800", "b200"]
    assert "my-h100-ib" not in hardware.links() and "my-h100-node" not in hardware.nodes()


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_accelerator_file_on_the_command_line(tmp_path, suffix):
    import yaml
    spec = _h100_copy()
    spec["links"] = []                               # the catalog's links: same numbers
    spec["node"]["scale_out"] = "ib-ndr400"
    path = tmp_path / ("gpu" + suffix)
    path.write_text(yaml.safe_dump(spec) if suffix == ".yaml" else json.dumps(spec))
    args = ("llama3-8b", "--gpus", "64", "--batch", "512", "--seq", "4096", "--top", "3")
    code, out, err = run(*args, "--accelerator", str(path))
    assert code == 0 and err == ""
    assert rows(out) == rows(run(*args)[1])          # the same figures plan the same
    assert hardware.registered() == []               # for this command only


@pytest.mark.parametrize("change, field", [
    (lambda s: s["accelerator"].pop("hbm_bytes"), "accelerator.hbm_bytes"),
    (lambda s: s["accelerator"].update(hbm_bytes="80 GB/s"), "accelerator.hbm_bytes"),
    (lambda s: s["accelerator"].update(hbm_bytes=-1), "accelerator.hbm_bytes"),
    (lambda s: s["accelerator"].update(name="h100-sxm"), "accelerator.name"),
    (lambda s: s["accelerator"].update(colour="green"), "colour"),
    (lambda s: s["accelerator"]["peak_flops"].update(bf16="fast"), "accelerator.peak_flops.bf16"),
    (lambda s: s["accelerator"]["matmul_ceiling"].pop("sms"), "accelerator.matmul_ceiling.sms"),
    (lambda s: s["links"][0].update(beta=0), "links[0].beta"),
    (lambda s: s["node"].update(scale_up="warp-drive"), "node.scale_up"),
    (lambda s: s["node"].update(gpus=0), "node.gpus"),
    (lambda s: s.update(extra=1), "extra"),
])
def test_bad_accelerator_spec_names_the_field(change, field):
    spec = _h100_copy()
    change(spec)
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        hardware.register(spec)
    assert hardware.registered() == []               # nothing half-registered


def test_bad_accelerator_file_on_the_command_line(tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text("accelerator: {name: x, peak_flops: {bf16: 1e15}, hbm_bytes: 80 GiB}\n")
    err = refused("llama3-8b", "--gpus", "8", "--batch", "8", "--seq", "2048", "--accelerator", str(path))[1]
    assert "--accelerator" in err and "accelerator.hbm_bandwidth" in err
    path.write_text("accelerator: [unclosed\n")
    assert "not valid YAML" in refused("llama3-8b", "--gpus", "8", "--batch", "8", "--seq", "2048",
                                       "--accelerator", str(path))[1]


# --------------------------------------------------------------------------- bad input
BASE = ("llama3-70b", "--batch", "1024", "--seq", "4096")


@pytest.mark.parametrize("argv, named", [
    (("--gpus", "0"), None), (("--gpus", "many"), None), (("--gpus", "64", "--tp", "0"), None),
    (("--gpus", "64", "--zero", "5"), None), (("--gpus", "64", "--zero", "0,4"), None),
    (("--gpus", "64", "--recompute", "some"), None),
    (("--gpus", "64", "--attention", "sparse"), None),
    (("--gpus", "64", "--gpu", "tpu-v5"), "--gpu"), (("--gpus", "64", "--gpu", "nvlink4"), "--gpu"),
    (("--gpus", "64", "--gpu", "b200"), "b200"), (("--gpus", "64", "--node", "dgx-z"), "--node"),
    (("--gpus", "64", "--gpu", "a100-80gb", "--dtype", "fp8"), "fp8"),
    (("--gpus", "64", "--node", "dgx-a100"), "dgx-a100"),
    (("--gpus", str(10**20)), "2**53"),
])
def test_bad_input_is_one_line_naming_it(argv, named):
    code, err = refused(*BASE, *argv)
    assert code == 2
    if named:
        assert named in err and len(err.strip().splitlines()) == 1


def test_zero_takes_the_stages_a_stack_offers():
    # --zero 0,1 searches both stages: its best is the better of --zero 0 and --zero 1
    args = (*BASE, "--gpus", "64", "--tp", "8", "--top", "1")
    rows = {z: run(*args, "--zero", z)[1].splitlines()[1].split() for z in ("0", "1", "0,1")}
    assert rows["0,1"][7] in ("0", "1")
    assert float(rows["0,1"][9]) == min(float(rows[z][9]) for z in ("0", "1"))


def test_b200_is_refused_and_not_offered():
    assert "b200" in hardware.accelerators() and "b200" not in hardware.plannable()
    assert "b200" not in cli._parser().format_help().split("the planner knows")[1].split("\n\n")[0]
    with pytest.raises(ValueError, match="b200.*measured"):
        plan.search("llama3-8b", gpus=8, global_batch=8, seq=2048, gpu="b200")


def test_sequence_above_the_context_is_refused_unless_allowed():
    ctx = models.get("llama3-70b").max_seq
    args = ("llama3-70b", "--gpus", "1024", "--batch", "1024", "--seq", str(2 * ctx))
    err = refused(*args)[1]
    assert "--seq" in err and f"{ctx:,}" in err and "--allow-long-seq" in err
    code, out, err = run(*args, "--allow-long-seq", "--top", "1")
    assert code == 0 and "warning" in err and len(rows(out)) == 1


def test_every_estimate_knob_has_a_flag():
    dests = {a.dest for a in cli._parser()._actions}
    named = {"model": "model", "gpus": "gpus", "gpu": "gpu", "global_batch": "batch", "seq": "seq"}
    for name in inspect.signature(plan.estimate).parameters:
        assert named.get(name, name) in dests, name


# --------------------------------------------------------------------------- no layout left
@pytest.mark.parametrize("case, constraint, detail", [
    (dict(gpus=7), "memory fits in HBM", "80.0 GiB"),          # pp 7 splits 80 layers unevenly
    (dict(gpus=1024, tp=3), "GPU product", "1,024"),
    (dict(gpus=96, tp=3), "heads divisible by TP", "64 attention heads"),
    (dict(gpus=10**6), "batch divisible by DP x micro-batch", "1,024 sequences"),
    (dict(gpus=8, seq=8192), "memory fits in HBM", "80.0 GiB"),
])
def test_no_layout_names_the_constraint(case, constraint, detail):
    case = dict(global_batch=1024, seq=4096) | case
    argv = ["llama3-70b", "--batch", str(case["global_batch"])]
    argv += [x for k in ("gpus", "seq", "tp") if k in case for x in ("--" + k, str(case[k]))]
    code, out, err = run(*argv)
    assert code == 1 and out == "" and "Traceback" not in err
    first = err.splitlines()[0]
    assert f"'{constraint}'" in first and detail in first
    for name, count in plan.funnel("llama3-70b", **case).items():   # the counts come with it
        assert f"{count:,}" in next(line for line in err.splitlines() if line.strip().startswith(name))


# --------------------------------------------------------------------------- the enumeration
def _brute_force(cfg, gpus, global_batch, seq, gpn=8, **fixed):
    """The funnel by listing the whole raw product (the search before it counted)."""
    powers = [2 ** i for i in range(gpus.bit_length())]
    space = dict(tp=powers, cp=powers, pp=[d for d in range(1, gpus + 1) if gpus % d == 0],
                 ep=[d for d in range(1, cfg.experts + 1) if cfg.experts % d == 0] if cfg.is_moe else [1],
                 vpp=[1, 2, 3, 4], mb=[1, 2, 4, 8], zero=[0, 1, 2, 3], rc=[0, 1, 2])
    dp = fixed.pop("dp", None)
    space.update({{"micro_batch": "mb"}.get(k, k): [v] for k, v in fixed.items()})
    g = np.meshgrid(*space.values(), indexing="ij")
    c = {k: v.ravel().astype(float) for k, v in zip(space, g, strict=True)}
    c["dp"] = gpus / (c["tp"] * c["cp"] * c["pp"])
    if dp is not None:                       # the raw space holds only that dp
        c = {k: v[c["dp"] == dp] for k, v in c.items()}
    L, H, KV, B = cfg.layers, cfg.heads, cfg.kv_heads, global_batch
    tests = [np.isclose(c["dp"], np.round(c["dp"])) & (c["dp"] >= 1), c["tp"] <= gpn,
             (H % c["tp"] == 0) & ((KV % c["tp"] == 0) | (c["tp"] % KV == 0)),
             plan.terms.splits(cfg, c["pp"], c["vpp"]),
             B % (c["dp"] * c["mb"]) == 0,
             (c["vpp"] == 1) | ((c["pp"] > 1) & ((B // (c["dp"] * c["mb"])) % c["pp"] == 0)),
             (c["cp"] == 1) | (seq % (2 * c["cp"]) == 0),
             (c["ep"] == 1) | ((cfg.experts % c["ep"] == 0) & ((c["dp"] * c["cp"]) % c["ep"] == 0))
             if cfg.is_moe else c["ep"] == 1]
    alive, counts = np.ones(len(c["tp"]), bool), [len(c["tp"])]
    for t in tests:
        alive &= t
        counts.append(int(alive.sum()))
    return counts


@pytest.mark.parametrize("model, gpus, batch, seq, fixed", [
    ("llama3-70b", 1, 16, 4096, {}), ("llama3-70b", 7, 1024, 4096, {}),
    ("llama3-70b", 96, 480, 4096, {}), ("llama3-70b", 1000, 1000, 8192, {}),
    ("llama3-8b", 256, 512, 8192, {"pp": 2}), ("mixtral-8x7b", 128, 256, 4096, {}),
    ("llama3-70b", 1024, 1024, 8192, {"tp": 3}), ("llama3-70b", 96, 480, 4096, {"dp": 12}),
    ("mixtral-8x7b", 64, 512, 4096, {"ep": 4, "micro_batch": 2}),
    ("llama3-70b", 512, 512, 8192, {"dp": 8, "pp": 8, "cp": 2}),
])
def test_funnel_counts_equal_listing_everything(model, gpus, batch, seq, fixed):
    cfg = models.get(model)
    counts = list(plan.funnel(model, gpus=gpus, global_batch=batch, seq=seq, **fixed).values())
    assert counts[:-1] == _brute_force(cfg, gpus, batch, seq, **dict(fixed))


def test_a_million_gpus_lists_a_bounded_space():
    # what --gpus 1000000 lists and scores, counted independently: tp a power of two up to
    # 8 dividing the 64 heads, tp x cp dividing 10**6, pp a divisor of the rest up to L + 2,
    # times 4 vpp x 4 micro-batch x 4 ZeRO x 3 recompute
    cfg, gpus = models.get("llama3-70b"), 10**6
    expected = sum(1 for tp in (1, 2, 4, 8) for cp in (2 ** i for i in range(20))
                   if gpus % (tp * cp) == 0
                   for pp in range(1, cfg.layers + 3) if (gpus // (tp * cp)) % pp == 0) * 4 * 4 * 12
    cols, implicit, weight = search_mod._grid(cfg, gpus, {}, 8)
    assert len(cols["tp"]) * weight == expected == 35328
    funnel = plan.funnel("llama3-70b", gpus=gpus, global_batch=1024, seq=4096)
    assert funnel["all candidates"] == 20 * 20 * 49 * 4 * 4 * 12 > 100 * expected  # 10**6 = 2**6 5**6
    bound = search_mod.listed_bound("llama3-70b")
    for g in (10**6, 10**9, 2**53, 2**53 - 1, 999_999_999_989):     # the last one prime
        cols, _, weight = search_mod._grid(cfg, g, {}, 8)
        assert len(cols["tp"]) * weight <= bound


def test_gpus_bound_is_stated():
    assert search_mod.GPUS_MAX == 2**53
    assert plan.funnel("llama3-70b", gpus=2**53, global_batch=1024, seq=4096)["memory fits in HBM"] == 0
    with pytest.raises(ValueError, match=r"gpus must be at most 2\*\*53"):
        plan.search("llama3-70b", gpus=2**53 + 1, global_batch=1024, seq=4096)


def test_factorisation():
    for n in (1, 2, 12, 10**6, 2**53, 999_999_999_989, 600_851_475_143, 2**31 - 1, 1_000_000_007 * 998_244_353):
        f = search_mod._factorize(n)
        assert math.prod(p ** e for p, e in f.items()) == n
        assert all(search_mod._is_prime(p) for p in f)
    assert search_mod._tau(search_mod._factorize(10**6)) == 49


# --------------------------------------------------------------------------- ties
def test_ties_on_step_time_are_ordered_by_memory():
    case = dict(gpus=64, global_batch=512, seq=4096, tp=1, pp=1, cp=1)
    got = plan.search("mixtral-8x7b", top=40, **case)
    every = [plan.estimate("mixtral-8x7b", **{k: v for k, v in case.items() if k not in ("tp", "pp", "cp")}, **c)
             for c in plan.configurations("mixtral-8x7b", **case)]
    fastest = min(e.step_time for e in every)
    key = [(round(e.step_time / fastest, 12), e.memory_per_gpu) for e in every]
    want = [every[i] for i in sorted(range(len(every)), key=key.__getitem__)][:40]
    assert [e.config for e in got] == [e.config for e in want]
    tied = [(a, b) for a, b in zip(got, got[1:]) if round(a.step_time / fastest, 12) == round(b.step_time / fastest, 12)]
    assert any(a.memory_per_gpu < b.memory_per_gpu for a, b in tied)       # a tie with two memories


# --------------------------------------------------------------------------- the table
HEADS = ("tp", "pp", "dp", "cp", "ep", "vpp", "mb", "zero", "recompute", "step s", "tokens/s",
         "MFU", "GiB")


@pytest.mark.parametrize("argv", [
    # torchtitan's op-level recompute: "selective-op" is wider than the header "recompute"
    ("llama3-8b", "--gpus", "8", "--batch", "16", "--seq", "8192", "--recompute", "selective-op",
     "--data-parallel-engine", "fsdp2", "--zero", "3"),
    ("llama3-70b", "--gpus", "1024", "--batch", "1024", "--seq", "8192", "--top", "4"),
])
def test_table_columns_line_up_with_the_header(argv):
    code, out, err = run(*argv)
    assert code == 0 and err == ""
    head, *body = out.splitlines()
    assert body == rows(out) and body
    # right-aligned: every cell of a column ends where its header ends
    ends, at = [], 0
    for name in HEADS:
        at = head.index(name, at) + len(name)
        ends.append(at)
    assert head.split() == " ".join(HEADS).split()
    for line in body:
        assert [m.end() for m in re.finditer(r"\S+", line)] == ends, (head, line)
    if "--recompute" in argv:
        assert {line.split()[8] for line in body} == {"selective-op"}
    assert max(map(len, out.splitlines())) <= 70                # a book page's width


# --------------------------------------------------------------------------- as a process
def test_python_m_dtbook_plan():
    py = [sys.executable, "-m", "dtbook", "plan"]
    ok = subprocess.run(py + ["llama3-8b", "--gpus", "64", "--batch", "512", "--seq", "8192", "--top", "2"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and len(rows(ok.stdout)) == 2 and "GiB" in ok.stdout.splitlines()[0]
    bad = subprocess.run(py + ["llama3-70b", "--gpus", str(10**20), "--batch", "1024", "--seq", "4096"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "2**53" in bad.stderr
    none = subprocess.run(py + ["llama3-70b", "--gpus", "7", "--batch", "1024", "--seq", "4096"],
                          capture_output=True, text=True, timeout=120)
    assert none.returncode == 1 and "Traceback" not in none.stderr and "batch divisible" in none.stderr
    helped = subprocess.run(py + ["--help"], capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and "--config" in helped.stdout and "--accelerator" in helped.stdout


def test_whole_number_arguments_have_their_minimum():
    # one validator for every integer flag: --gpus and its like from 1, a planner-chosen
    # count such as --first-stage-layers from 0; the message names the minimum
    assert cli._at_least(0)("0") == 0 and cli._at_least(1)("1_000") == 1000
    for minimum, bad in ((0, "-1"), (1, "0"), (1, "two"), (0, "1.5")):
        with pytest.raises(argparse.ArgumentTypeError, match=f">= {minimum}, got '{bad}'"):
            cli._at_least(minimum)(bad)
    assert refused("llama3-8b", "--gpus", "0", "--batch", "8", "--seq", "4096")[0] == 2
