"""Our GPT plugin trained by our engine against PyTorch running the same model (torch_gpt.py):
gpt_trace (tests/tools) trains on one rank and records the initial parameters, the exact batches,
the gradients the optimizer received at step 1 and every step's loss; here PyTorch loads those
parameters by name, replays those batches with torch.optim.AdamW and the same hyperparameters, and
the two must agree. Two initialisations, as each exposes mistakes the other hides: GPT-2's
init_std 0.02 keeps activations small (LayerNorm's eps matters, GELU is nearly linear, softmax nearly
uniform), init_std 0.3 makes them O(1) (GELU's curvature, a peaked softmax).

Our AdamW (runtime/optim/adam.cpp) is p -= lr*(m_hat/(sqrt(v_hat) + eps) + wd*p) with
m_hat = m/(1-b1^t), v_hat = v/(1-b2^t); torch's is p *= 1 - lr*wd, then
p -= (lr/(1-b1^t)) * m/(sqrt(v)/sqrt(1-b2^t) + eps): the same update (eps after the bias-corrected
square root, decay of the pre-update p), up to rounding. (Adam's eps itself is out of sight: every
gradient here is far above 1e-8, so eps = 1e-6 on one side would pass too.)

Gradient error of a tensor: max|ours - torch| / max|torch| over its elements (a per-tensor scale:
elementwise relative errors are meaningless for entries that are ~0, such as the attention key bias,
whose exact gradient is 0 because softmax ignores a per-row shift).

Needs Debian's python3-torch (scripts/install-deps.sh); skipped only when torch cannot be imported.
"""
import array, json, os, random, subprocess

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: apt-get install python3-torch)")
from conftest import ROOT  # noqa: E402
from torch_gpt import GPT, GPTConfig  # noqa: E402

TRACE = os.environ.get("GPT_TRACE_BIN", os.path.join(ROOT, "build", "tests", "tools", "gpt_trace"))
PLUGIN = os.environ.get("DS_GPT_PLUGIN", os.path.join(ROOT, "build", "plugins", "libds_model_gpt.so"))
SHAPE = {"n_layer": 2, "n_head": 2, "n_embd": 32, "seq_len": 16, "vocab_size": 256}
MODELS = {"init 0.02": dict(SHAPE, init_std=0.02), "init 0.3": dict(SHAPE, init_std=0.3)}
STEPS, MICRO = 10, 4
ADAMW = {"lr": 3e-3, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}

# fp32: both sides round every operation to fp32 (unit roundoff 2^-24 ~ 6e-8), in different orders;
# the bounds leave a wide margin over the ~1e-7 (loss) and <= 3e-6 (gradients) seen.
FP32_LOSS0, FP32_GRAD, FP32_LOSSES = 1e-5, 1e-4, 1e-4

# bf16 (GPT-2's init): our bf16 runs against torch's fp32 run from the same fp32 master weights.
# The engine rounds to bf16 (unit roundoff u = 2^-8: <= u/2 relative error per rounding) every
# weight, each layer's output (embed, h0, h1: the residual stream), each layer's input gradient and,
# with bf16 gradient storage, the accumulated gradients; inside a layer the plugin computes in fp32,
# and the loss stays fp32.
# Loss at step 0: the logits z = ln_f(x).wte^T get a relative error <~ u from the rounded x and wte,
# so |dz| <~ u * sum_c |ln_f(x)_c * wte_vc| ~ 0.4u here, and the mean cross-entropy moves by at most
# 2 max|dz| ~ u/7 of ln 256 if every error were aligned; they are independent and average out over
# the B*T positions (~u/250 is seen). We allow u/4.
# Loss at step k: that, plus the drift of the weights: AdamW moves a weight by ~lr * m_hat/sqrt(v_hat)
# per step and bf16 changes that direction by ~u (the gradients' relative error), so the two runs'
# weights end up ~u of the distance travelled apart and their losses ~u * (L_0 - L_k): we allow
# u/4 * L_k + u * (L_0 - L_k) (about half of that is seen at step 10).
# Gradients: one passes through <~ 10 of those roundings (its layer's weights and input activation,
# the output gradient coming back through up to 3 layers, the storage), each <= u/2, amplified a
# little by LayerNorm's and softmax's backward: we allow 8u (3%) of the tensor's largest gradient
# (<= 2u is seen). And at least u/16 somewhere: otherwise nothing was rounded to bf16 at all.
U_BF16 = 2.0 ** -8
BF16_LOSS0, BF16_GRAD, BF16_GRAD_MIN = U_BF16 / 4, 8 * U_BF16, U_BF16 / 16


def bf16_loss_tolerance(ref_losses, k):
    return U_BF16 / 4 * ref_losses[k] + U_BF16 * (ref_losses[0] - ref_losses[k])


def corpus_text():
    """Deterministic English-like text, long enough for an epoch longer than STEPS."""
    rng = random.Random(20240520)
    words = ("the model reads tokens and predicts the next one while the engine owns every buffer "
             "gradients flow back through each layer in order and adam updates weights").split()
    return " ".join(rng.choice(words) for _ in range(1500)) + "\n"


def read(path, typecode):
    a = array.array(typecode)
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


def run_trace(tmp, model, precision, stage, optimizer=None):
    """gpt_trace's record of a run, with the binaries loaded as tensors (`optimizer`: an optimizer section
    for gpt_trace's --optimizer; none: AdamW with ADAMW's values)."""
    out = tmp / f"{model}-{precision}-stage{stage}-{len(os.listdir(tmp))}".replace(" ", "_")
    out.mkdir()
    text = tmp / "corpus.txt"
    if not text.exists():
        text.write_text(corpus_text())
    args = [TRACE, "--plugin", PLUGIN, "--text", str(text), "--out", str(out), "--model", json.dumps(MODELS[model]),
            "--precision", precision, "--stage", str(stage), "--steps", str(STEPS), "--micro", str(MICRO),
            "--lr", str(ADAMW["lr"]), "--beta1", str(ADAMW["betas"][0]), "--beta2", str(ADAMW["betas"][1]),
            "--eps", str(ADAMW["eps"]), "--weight-decay", str(ADAMW["weight_decay"])]
    if optimizer:
        args += ["--optimizer", json.dumps(optimizer)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(out / "manifest.json") as f:
        m = json.load(f)
    m["params"] = torch.tensor(read(out / "params.bin", "f"))
    m["grads"] = torch.tensor(read(out / "grads.bin", "f"))
    m["batches"] = torch.tensor(read(out / "batches.bin", "i")).long().view(STEPS, 2, MICRO, SHAPE["seq_len"])
    m["tokens"] = list(read(out / "tokens.bin", "H"))
    return m


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """trace(model, precision="fp32", stage=0, optimizer=None): one gpt_trace run, made once per module."""
    for path in (TRACE, PLUGIN):
        if not os.path.exists(path):
            pytest.fail(f"{path} not found (build first, or set GPT_TRACE_BIN / DS_GPT_PLUGIN)")
    tmp, made = tmp_path_factory.mktemp("gpt_torch"), {}

    def get(model, precision="fp32", stage=0, optimizer=None):
        key = (model, precision, stage, json.dumps(optimizer))
        if key not in made:
            made[key] = run_trace(tmp, model, precision, stage, optimizer)
        return made[key]
    return get


def own_slots(m):
    return [s for s in m["slots"] if "tied_to" not in s]


def torch_model(m, dtype, tied=True):
    """torch_gpt.GPT holding the trace's initial parameters (by name), in dtype."""
    model = GPT(GPTConfig(**m["model"])).to(dtype)
    params = dict(model.named_parameters())
    assert sorted(params) == sorted(s["name"] for s in own_slots(m))
    with torch.no_grad():
        for s in own_slots(m):
            n = torch.Size(s["shape"]).numel()
            params[s["name"]].copy_(m["params"][s["offset"]:s["offset"] + n].view(s["shape"]))
    for s in m["slots"]:  # a tied slot is the very tensor it names in torch too
        if "tied_to" in s:
            layer, name = s["name"].rsplit(".", 1)
            assert getattr(model.get_submodule(layer), name) is params[s["tied_to"]]
    if not tied:  # the head gets a copy of wte of its own: its gradient is then the head's part alone
        model.head.wte = torch.nn.Parameter(model.embed.wte.detach().clone())
    return model


def replay(m, dtype, steps=STEPS, tied=True, make_optimizer=None):
    """(losses, step-1 gradients by name) of torch running the trace's batches with AdamW, or with
    make_optimizer(parameters)."""
    model = torch_model(m, dtype, tied)
    if make_optimizer:
        opt = make_optimizer(model.parameters())
    else:
        o = m["optimizer"]
        assert o == dict(ADAMW, type="AdamW", betas=list(ADAMW["betas"]))
        opt = torch.optim.AdamW(model.parameters(), lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"],
                                weight_decay=o["weight_decay"])
    losses, grads = [], None
    for s in range(steps):
        x, y = m["batches"][s]
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        if s == 0:
            grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        losses.append(loss.item())
        opt.step()
    return losses, grads


@pytest.fixture(scope="module")
def reference(trace):
    """reference(model, dtype=torch.float32): torch's (losses, step-1 gradients) replaying the fp32
    trace; float64 tells how far each fp32 side is from exact."""
    made = {}

    def get(model, dtype=torch.float32):
        if (model, dtype) not in made:
            made[model, dtype] = replay(trace(model), dtype)
        return made[model, dtype]
    return get


def ours(m, name):
    s = next(s for s in m["slots"] if s["name"] == name)
    return m["grads"][s["offset"]:s["offset"] + torch.Size(s["shape"]).numel()].view(s["shape"]).double()


def grad_error(mine, ref):
    ref = ref.double()
    return ((mine - ref).abs().max() / ref.abs().max()).item()


def grad_errors(m, ref):
    return {s["name"]: grad_error(ours(m, s["name"]), ref[s["name"]]) for s in own_slots(m)}


def relative(a, b):
    return abs(a - b) / abs(b)


@pytest.mark.parametrize("model", MODELS)
def test_batches_are_the_token_windows(trace, model):
    m, T = trace(model), SHAPE["seq_len"]
    toks = m["tokens"]
    assert len(m["steps"]) == STEPS
    for s, step in enumerate(m["steps"]):
        x, y = m["batches"][s]
        assert len(step["indices"]) == MICRO
        for b, i in enumerate(step["indices"]):
            assert x[b].tolist() == toks[i * T:i * T + T] and y[b].tolist() == toks[i * T + 1:i * T + T + 1]


@pytest.mark.parametrize("model", MODELS)
def test_fp32_loss_at_step_0(trace, reference, model):
    ref, exact = reference(model)[0][0], reference(model, torch.float64)[0][0]
    loss = trace(model)["steps"][0]["loss"]
    print(f"[{model}] fp32 loss at step 0: ours {loss:.9f}, torch {ref:.9f}, float64 {exact:.9f}; "
          f"relative error {relative(loss, ref):.2e} (ours vs float64 {relative(loss, exact):.2e})")
    assert relative(loss, ref) <= FP32_LOSS0


@pytest.mark.parametrize("model", MODELS)
def test_fp32_gradients(trace, reference, model):
    errors = grad_errors(trace(model), reference(model)[1])
    exact = grad_errors(trace(model), reference(model, torch.float64)[1])
    worst = max(errors, key=errors.get)
    print(f"[{model}] fp32 gradients: worst {worst} {errors[worst]:.2e} "
          f"(ours vs float64: worst {max(exact.values()):.2e})")
    assert {n: e for n, e in errors.items() if e > FP32_GRAD} == {}


@pytest.mark.parametrize("model", MODELS)
def test_tied_wte_gradient_is_the_sum_of_both_uses(trace, reference, model):
    _, parts = replay(trace(model), torch.float32, steps=1, tied=False)
    embedding, head = parts["embed.wte"].double(), parts["head.wte"].double()
    total = reference(model)[1]["embed.wte"]
    assert grad_error(embedding + head, total) <= FP32_GRAD  # torch's tied gradient is that sum
    mine = ours(trace(model), "embed.wte")
    print(f"[{model}] wte gradient: vs the sum {grad_error(mine, total):.2e}, vs the embedding's part "
          f"{grad_error(mine, embedding):.2e}, vs the head's part {grad_error(mine, head):.2e}")
    assert grad_error(mine, total) <= FP32_GRAD
    assert grad_error(mine, embedding) > 100 * FP32_GRAD and grad_error(mine, head) > 100 * FP32_GRAD


@pytest.mark.parametrize("model", MODELS)
def test_fp32_losses_over_10_adamw_steps(trace, reference, model):
    mine = [s["loss"] for s in trace(model)["steps"]]
    ref = reference(model)[0]
    errors = [relative(a, b) for a, b in zip(mine, ref)]
    print(f"[{model}] fp32 losses {mine[0]:.6f} -> {mine[-1]:.6f}, torch {ref[0]:.6f} -> {ref[-1]:.6f}; "
          f"worst relative error {max(errors):.2e} at step {errors.index(max(errors)) + 1}")
    assert ref[-1] < ref[0] - 0.5  # it learns: the comparison covers real updates
    assert max(errors) <= FP32_LOSSES


# RMSprop (a torch.optim class DeepSpeed runs by name): our engine with "type": "RMSprop" against
# torch.optim.RMSprop with the same keys, plain and with every option (three state buffers).
RMSPROP = {"plain": {"lr": 1e-3},
           "momentum, centered, decay": {"lr": 1e-3, "alpha": 0.9, "eps": 1e-6, "weight_decay": 0.01,
                                         "momentum": 0.5, "centered": True}}


@pytest.mark.parametrize("variant", RMSPROP)
def test_fp32_losses_over_10_rmsprop_steps(trace, variant):
    params = RMSPROP[variant]
    m = trace("init 0.02", optimizer={"type": "RMSprop", "params": params})
    mine = [s["loss"] for s in m["steps"]]
    ref = replay(m, torch.float32, make_optimizer=lambda p: torch.optim.RMSprop(p, **params))[0]
    errors = [relative(a, b) for a, b in zip(mine, ref)]
    print(f"[RMSprop {variant}] fp32 losses {mine[0]:.6f} -> {mine[-1]:.6f}, torch {ref[0]:.6f} -> {ref[-1]:.6f}; "
          f"worst relative error {max(errors):.2e} at step {errors.index(max(errors)) + 1}")
    assert ref[-1] < ref[0] - 0.5  # it learns: the comparison covers real updates
    assert max(errors) <= FP32_LOSSES


def test_same_data_and_initial_weights_in_every_precision_and_stage(trace):
    a = trace("init 0.02")
    for b in (trace("init 0.02", "fp32", 3), trace("init 0.02", "bf16", 0), trace("init 0.02", "bf16", 2)):
        assert [s["indices"] for s in b["steps"]] == [s["indices"] for s in a["steps"]]
        assert torch.equal(b["batches"], a["batches"]) and torch.equal(b["params"], a["params"])


def test_fp32_stage_3_is_bit_identical_to_stage_0(trace):
    a, b = trace("init 0.02"), trace("init 0.02", "fp32", 3)
    assert torch.equal(a["grads"], b["grads"]) and a["steps"] == b["steps"]


# At stage 0 bf16 gradients accumulate in fp32, at stage 2 in bf16 (DeepSpeed's defaults).
@pytest.mark.parametrize("stage", [0, 2])
def test_bf16_against_the_fp32_reference(trace, reference, stage):
    m = trace("init 0.02", "bf16", stage)
    ref_losses, ref_grads = reference("init 0.02")
    mine = [s["loss"] for s in m["steps"]]
    loss_errors = [abs(a - b) for a, b in zip(mine, ref_losses)]
    allowed = [bf16_loss_tolerance(ref_losses, k) for k in range(STEPS)]
    errors = grad_errors(m, ref_grads)
    worst = max(errors, key=errors.get)
    print(f"bf16 stage {stage} (gradients {m['grad_dtype']}): loss at step 0 {loss_errors[0] / ref_losses[0]:.2e} "
          f"relative, steps 1-{STEPS}: worst {max(e / a for e, a in zip(loss_errors, allowed)):.2f} of the allowance "
          f"(at step {STEPS}: {loss_errors[-1] / ref_losses[-1]:.2e} relative); gradients: worst {worst} "
          f"{errors[worst]:.2e}, median {sorted(errors.values())[len(errors) // 2]:.2e}")
    assert loss_errors[0] / ref_losses[0] <= BF16_LOSS0
    assert {n: e for n, e in errors.items() if e > BF16_GRAD} == {}
    assert max(errors.values()) >= BF16_GRAD_MIN
    assert all(e <= a for e, a in zip(loss_errors, allowed))
