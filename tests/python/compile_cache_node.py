"""One node's torch.compile run, for test_compile_cache.py and tools/bench's torch-compile section:
run as `python compile_cache_node.py OUT.pt` in a fresh process, it compiles the models MODELS
names (comma-separated) and prints RESULT {json} with what it took and what each cache did.

Environment: MODELS (llama, gpt2, bert: Hugging Face models from small configs with random
weights, a training step with backward; transformer: tests/python/inductor_models' 2-block
transformer, inference; small: a function of two ops; dynamic: a function called at two
sequence lengths; cuda-autotune: a matmul compiled with mode="max-autotune" on a GPU), KILN (1: kiln.torch.compile_cache.install(); 0: torch as shipped), plus the
usual KILN_CACHE_DIR, KILN_REMOTE_CACHE, TORCHINDUCTOR_CACHE_DIR, TORCH_COMPILE_JOB_ID.
LOWERING_HOOK=1 prints "LOWERING" (flushed) when Inductor starts lowering a graph, for tests
that kill a process mid-compile. POISON=PATH makes this node an attacker (docs/SECURITY.md): every
entry it stores is a pickle whose __reduce__ writes PATH when it is loaded. HF_HIDDEN sets the Hugging Face models' hidden size (32).
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
start = time.perf_counter()

import torch  # noqa: E402

torch.manual_seed(0)
SMALL = dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


def hf_model(name):
    """A Hugging Face model from a small config (random weights: nothing is downloaded)."""
    import transformers

    small = dict(SMALL)
    if os.environ.get("HF_HIDDEN"):  # the benchmark's size (tools/bench's torch-compile section)
        hidden = int(os.environ["HF_HIDDEN"])
        small.update(hidden_size=hidden, intermediate_size=4 * hidden)
    if name == "llama":
        config = transformers.LlamaConfig(max_position_embeddings=64, num_key_value_heads=2, **small)
        return transformers.LlamaForCausalLM(config)
    if name == "gpt2":
        config = transformers.GPT2Config(vocab_size=128, n_embd=small["hidden_size"], n_layer=2, n_head=4, n_positions=64)
        return transformers.GPT2LMHeadModel(config)
    if name == "bert":
        config = transformers.BertConfig(max_position_embeddings=64, **small)
        return transformers.BertForMaskedLM(config)
    raise ValueError("unknown model " + name)


def train_step(name, out):
    """One forward and backward of a compiled Hugging Face model: its loss and gradients."""
    torch.manual_seed(0)
    model = hf_model(name).train()
    for module in model.modules():  # dropout off: two nodes must compute the same numbers
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1))
    compiled = torch.compile(model)
    loss = compiled(input_ids=ids, labels=ids).loss
    loss.backward()
    out[name + ".loss"] = loss.detach()
    for pname, p in model.named_parameters():
        if p.grad is not None:
            out[name + ".grad." + pname] = p.grad.detach().clone()


def run(models):
    out = {}
    for name in models:
        if name in ("llama", "gpt2", "bert"):
            train_step(name, out)
        elif name == "transformer":
            import inductor_models

            model = inductor_models.transformer(d=int(os.environ.get("MODEL_D", "64")), blocks=2)
            with torch.no_grad():
                out["transformer"] = torch.compile(model)(torch.randn(4, 16, model[0].norm1.normalized_shape[0]))
        elif name == "small":
            out["small"] = torch.compile(lambda x: (x * 2).sin().sum(-1))(torch.arange(24.0).reshape(4, 6))
        elif name == "cuda-autotune":
            # On a GPU: Triton kernels and max-autotune's benchmarks (tools/gpu-compile-cache-check).
            g = torch.Generator(device="cuda").manual_seed(0)
            a, b = (torch.randn(512, 512, device="cuda", generator=g) for _ in range(2))
            fn = torch.compile(lambda a, b: torch.nn.functional.gelu(a @ b) * 2, mode="max-autotune")
            out["cuda-autotune"] = fn(a, b).cpu()
        elif name == "dynamic":
            # Without a profile Dynamo compiles n=8 as static, then n=13 as dynamic (2 graphs);
            # with the job's profile from another node it compiles the dynamic one first (1).
            fn = torch.compile(lambda q: (q @ q.transpose(-2, -1)).softmax(-1) + q.sum(-1, keepdim=True))
            for n in (8, 13):
                out["dynamic.%d" % n] = fn(torch.arange(n * 4.0).reshape(n, 4) / 10)
        else:
            raise SystemExit("compile_cache_node: unknown model " + name)
    return out


class _Marker:
    """Loading this runs code: it writes the marker file (what an attacker's entry would do)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (exec, ("open(%r, 'w').write('ran')" % self.path,))


def poison(marker):
    """An attacker's node: its entries, under torch's real keys, are pickles that run code."""
    import base64
    import pickle

    from kiln.torch import compile_cache

    put = compile_cache._KilnStore._put

    def poisoned(self, key, data):
        # torch's remote entries are JSON whose "data" is a base64 pickle (FX graphs, AOTAutograd):
        # the same shape, so torch unpickles it as it would its own.
        evil = base64.b64encode(pickle.dumps(_Marker(marker))).decode()
        return put(self, key, json.dumps({"data": evil, "time_taken_ms": 1}).encode())

    compile_cache._KilnStore._put = poisoned


def main():
    if os.environ.get("KILN", "1") == "1":
        import kiln.torch.compile_cache

        kiln.torch.compile_cache.install()
        if os.environ.get("POISON"):
            poison(os.environ["POISON"])
    # Where the first call's time goes: Inductor's lowering and code generation of each graph
    # (fx_codegen_and_compile, which includes its C++ builds) and the C++ builds themselves
    # (run_compile_cmd: kiln's, or one g++ process each); the rest is Dynamo's trace, AOTAutograd
    # and loading.
    from torch._inductor import compile_fx, cpp_builder

    spent = {"lowering_s": 0.0, "cxx_s": 0.0, "cxx_commands": 0}
    lower, build = compile_fx.fx_codegen_and_compile, cpp_builder.run_compile_cmd
    announce = os.environ.get("LOWERING_HOOK") == "1"

    def lowering(*args, **kwargs):
        if announce:
            print("LOWERING", flush=True)
        t = time.perf_counter()
        try:
            return lower(*args, **kwargs)
        finally:
            spent["lowering_s"] += time.perf_counter() - t

    intervals = []  # each build's (start, end): their union is the wall time any build ran

    def building(*args, **kwargs):
        t = time.perf_counter()
        try:
            return build(*args, **kwargs)
        finally:
            end = time.perf_counter()
            spent["cxx_s"] += end - t
            spent["cxx_commands"] += 1
            intervals.append((t, end))

    compile_fx.fx_codegen_and_compile = lowering
    cpp_builder.run_compile_cmd = building
    triton_counts = None
    if torch.cuda.is_available():  # Triton's kernels compiled or found (its compilation listener)
        import triton

        triton_counts = {"compiles": 0, "hits": 0}

        def listener(*, src, metadata, metadata_group, times, cache_hit):
            triton_counts["hits" if cache_hit else "compiles"] += 1

        triton.knobs.compilation.listener = listener
    imported = time.perf_counter() - start
    first = time.perf_counter()
    out = run(os.environ.get("MODELS", "small").split(","))
    first = time.perf_counter() - first
    from torch._dynamo.utils import counters

    try:  # torch's own timers of its compile phases (dynamo_timed), summed per phase
        from torch._dynamo.utils import compilation_time_metrics
        phases = {k: round(sum(v), 3) for k, v in compilation_time_metrics.items()}
    except ImportError:
        phases = {}

    # ready_s: from the start of this script to the first call's end, the figure to compare
    # (kiln's install imports Inductor's modules that torch imports on its first compile).
    covered, reach = 0.0, float("-inf")
    for t, end in sorted(intervals):
        covered += max(0.0, end - max(t, reach))
        reach = max(reach, end)
    spent["cxx_wall_s"] = covered
    report = {"first_call_s": first, "import_s": imported, "ready_s": time.perf_counter() - start,
              "inductor": dict(counters["inductor"]), "aot_autograd": dict(counters["aot_autograd"]),
              "graphs": counters["stats"]["unique_graphs"], "triton": triton_counts, "phases": phases, **spent}
    if os.environ.get("KILN", "1") == "1":
        import kiln.torch.compile_cache
        import kiln.torch.inductor

        report["caches"] = kiln.torch.compile_cache.stats()
        report["kiln"] = kiln.torch.inductor.stats()
        from kiln.torch import isa_probes

        report["isa_probes"] = isa_probes.stats()

    torch.save(out, sys.argv[1])
    print("RESULT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
