"""DeepSpeed's CUDA op builders (FusedAdam, the quantizer, the training
transformer) built with DeepSpeed's GPU-machine flags and TORCH_CUDA_ARCH_LIST=9.0:
kiln.deepspeed cold (empty cache), kiln with the builder's header artifacts
stored, and DeepSpeed's own build (ninja, nvcc and g++, ccache off), interleaved
in one run (tools/bench/deepspeed_builders.py times each in a fresh process)
"""
import json
import os
import shutil

from ..harness import add, BUILD, child_env, KILN, ROOT, run, stats_ms, VENV_PYTHON

OPT_IN = True  # slow: run only when named in --only

DS_BUILDERS = ["FusedAdamBuilder", "QuantizerBuilder", "TransformerBuilder"]


def section(a, work):
    """Per DeepSpeed builder: kiln cold, kiln with the builder's header artifacts (PCHs) stored,
    DeepSpeed's own build; each sample a fresh process, the three interleaved, same flags."""
    driver = os.path.join(ROOT, "tools", "bench", "deepspeed_builders.py")
    probe = run([VENV_PYTHON, "-c", "import deepspeed, torch; assert torch.version.cuda"], check=False, env=child_env())
    if probe.returncode != 0:
        add("deepspeed-builders", "DeepSpeed's CUDA builders", None, "",
            missing=f"DeepSpeed or a CUDA torch does not import under {VENV_PYTHON}: {probe.stderr.strip()[-300:]}")
        return
    reps = 1 if a.quick else 3
    base_env = child_env()
    base_env.update({"TORCH_CUDA_ARCH_LIST": "9.0", "CCACHE_DISABLE": "1", "MAX_JOBS": str(os.cpu_count()),
                     "PYTHONPATH": os.path.join(BUILD, "python")})

    def build(how, cls, tag):
        env = dict(base_env, KILN_CACHE_DIR=os.path.join(work, tag + "-cache"), TORCH_EXTENSIONS_DIR=os.path.join(work, tag + "-ext"))
        out = run([VENV_PYTHON, driver, how, cls], env=env).stdout.strip().splitlines()[-1]
        return json.loads(out)["seconds"] * 1000

    # KILN_COMPARE_DS_BUILDERS=FusedAdamBuilder,... picks fewer (or other) builders.
    chosen = [c for c in os.environ.get("KILN_COMPARE_DS_BUILDERS", "").split(",") if c] or DS_BUILDERS
    for cls in chosen:
        # A cache holding only this builder's header artifacts: its PCHs, packed from a first build.
        build("kiln", cls, f"{cls}-base")
        base = os.path.join(work, f"{cls}-base-cache")
        pch_ops = sorted({e["op"] for e in json.loads(run([KILN, "--cache-dir", base, "cache", "ls", "--json"]).stdout)
                          if e["kind"] == "pch"})
        bundle = os.path.join(work, f"{cls}-pch.bundle")
        if pch_ops:
            run([KILN, "--cache-dir", base, "cache", "pack", bundle] + [x for op in pch_ops for x in ("--op", op)])
        cold, stored, own = [], [], []
        for i in range(reps):
            cold.append(build("kiln", cls, f"{cls}-cold{i}"))
            if pch_ops:
                run([KILN, "--cache-dir", os.path.join(work, f"{cls}-stored{i}-cache"), "cache", "unpack", bundle])
            stored.append(build("kiln", cls, f"{cls}-stored{i}"))
            own.append(build("deepspeed", cls, f"{cls}-own{i}"))
            for tag in ("cold", "stored", "own"):
                shutil.rmtree(os.path.join(work, f"{cls}-{tag}{i}-cache"), ignore_errors=True)
                shutil.rmtree(os.path.join(work, f"{cls}-{tag}{i}-ext"), ignore_errors=True)
        peer_cmd = "builder.jit_load() (torch cpp_extension: ninja, nvcc, g++; CCACHE_DISABLE=1), fresh TORCH_EXTENSIONS_DIR"
        how = "kiln.deepspeed.load_builder(builder) in a fresh process, TORCH_CUDA_ARCH_LIST=9.0"
        add("deepspeed-builders", f"{cls} cold (empty kiln cache)", stats_ms(cold), how + ", empty KILN_CACHE_DIR",
            stats_ms(own), peer_cmd, note="goal >= 2x on the median builder")
        add("deepspeed-builders", f"{cls}, its header artifacts stored", stats_ms(stored),
            how + f", KILN_CACHE_DIR holding only its PCHs ({len(pch_ops)}: {', '.join(pch_ops) or 'none'})",
            stats_ms(own), peer_cmd, note="goal >= 5x on the median builder")
