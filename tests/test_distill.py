"""distill_: training the kept values toward the dense model, masks fixed."""

import copy
import itertools

import pytest
import torch

import sparsekernels as sk
from _helpers import tiny_bert


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(32, 64)
        self.b = torch.nn.Linear(64, 16)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def _pair():
    torch.manual_seed(0)
    teacher = _Net().double()
    student = copy.deepcopy(teacher)
    sk.sparsify_(student, "2:4")
    batches = [{"x": torch.randn(24, 32, dtype=torch.float64)} for _ in range(3)]
    return teacher, student, batches


def _error(student, teacher, batches):
    with torch.no_grad():
        return sum(float((student(**b) - teacher(**b)).square().mean()) for b in batches)


def test_distill_lowers_the_error_and_keeps_the_masks():
    teacher, student, batches = _pair()
    teacher_state = {k: v.clone() for k, v in teacher.state_dict().items()}
    masks = {k: v.clone() for k, v in student.state_dict().items() if "indices" in k}
    dense_bias = student.a.bias.detach().clone()
    before = _error(student, teacher, batches)
    losses = sk.prune.distill_(student, teacher, batches, epochs=20, lr=3e-3)
    after = _error(student, teacher, batches)
    assert len(losses) == 20 and losses[-1] < losses[0]
    assert after < 0.5 * before
    for k, v in student.state_dict().items():
        if "indices" in k:
            assert torch.equal(v, masks[k])  # the pattern never moves
    assert torch.equal(student.a.bias, dense_bias)  # only the sparse values train
    assert all(torch.equal(v, teacher_state[k]) for k, v in teacher.state_dict().items())
    assert all(p.requires_grad for p in student.parameters())  # flags restored
    assert not student.training


def test_cosine_schedule():
    """Epoch 0 runs at lr either way; from epoch 1 the cosine rate is lower, so two epochs
    differ from the constant rate's, and the error still falls."""
    results = {}
    for schedule, epochs in itertools.product(("constant", "cosine"), (1, 2)):
        teacher, student, batches = _pair()
        before = _error(student, teacher, batches)
        sk.prune.distill_(student, teacher, batches, epochs=epochs, lr=3e-3, lr_schedule=schedule)
        assert _error(student, teacher, batches) < before
        results[schedule, epochs] = student.a.values.detach().clone()
    assert torch.equal(results["constant", 1], results["cosine", 1])
    assert not torch.allclose(results["constant", 2], results["cosine", 2])
    teacher, student, batches = _pair()
    with pytest.raises(ValueError, match="lr_schedule"):
        sk.prune.distill_(student, teacher, batches, lr_schedule="linear")


def test_masked_mean_ignores_padding():
    """With an attention_mask, padded positions do not count (3-D outputs)."""

    class Seq(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.f = torch.nn.Linear(8, 8)

        def forward(self, x, attention_mask):
            return self.f(x)

    torch.manual_seed(0)
    teacher = Seq().double()
    student = copy.deepcopy(teacher)
    sk.sparsify_(student, "50%")
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    poisoned = x.clone()
    poisoned[0, 3:] = 1e6  # padding: huge, but must not drive the training
    losses = sk.prune.distill_(
        student, teacher, [{"x": poisoned, "attention_mask": mask}], epochs=3, lr=1e-3,
        output=lambda m, b: m(**b),
    )  # fmt: skip
    assert max(losses) < 1e3


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"epochs": -1}, "epochs must be a non-negative int"),
        ({"epochs": 1.5}, "epochs must be a non-negative int"),
        ({"lr": 0}, "lr must be a positive finite number"),
        ({"lr": float("inf")}, "lr must be a positive finite number"),
    ],
)
def test_bad_arguments(kwargs, message):
    teacher, student, batches = _pair()
    with pytest.raises(ValueError, match=message):
        sk.prune.distill_(student, teacher, batches, **kwargs)


def test_bad_models_and_batches():
    teacher, student, batches = _pair()
    with pytest.raises(ValueError, match="batches must hold at least one batch"):
        sk.prune.distill_(student, teacher, [])
    with pytest.raises(ValueError, match="student has no sparse layers"):
        sk.prune.distill_(copy.deepcopy(teacher), teacher, batches)
    with pytest.raises(ValueError, match="student and teacher must be two models"):
        sk.prune.distill_(student, student, batches)
    tensors = [torch.randn(2, 8)]  # not keyword dicts, and no output= that takes them
    with pytest.raises(TypeError, match="batches must hold keyword-argument dicts.*Tensor"):
        sk.prune.distill_(student, teacher, tensors)


def test_an_all_padding_batch_is_refused():
    teacher, student, _ = _pair()

    class Masked(torch.nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, x, attention_mask):
            return self.net(x)

    batches = [
        {"x": torch.randn(2, 5, 32, dtype=torch.float64), "attention_mask": torch.zeros(2, 5)}
    ]
    values = student.a.values.detach().clone()
    with pytest.raises(ValueError, match="attention_mask with no tokens"):
        sk.prune.distill_(Masked(student), Masked(teacher), batches, epochs=1)
    assert torch.equal(student.a.values, values)  # no NaN step taken


def test_generators_refilled_lists_and_flags_restored():
    """`also` may be a generator; a function refilling one list gets each epoch's targets;
    frozen values and the teacher's mode are as they were afterwards."""
    teacher, student, batches = _pair()
    student.b.bias.requires_grad_(False)
    before = student.b.bias.detach().clone()
    sk.prune.distill_(
        student, teacher, batches, epochs=2, lr=1e-2, also=(p for p in [student.b.bias])
    )
    assert not torch.equal(student.b.bias, before) and not student.b.bias.requires_grad
    teacher.train()
    student.a.values.requires_grad_(False)
    shared: list = []

    def refill(epoch):
        torch.manual_seed(epoch)
        shared[:] = [{"x": torch.randn(24, 32, dtype=torch.float64) * (1 + 10 * epoch)}]
        return shared

    losses = sk.prune.distill_(student, teacher, refill, epochs=2, lr=1e-9)
    true_loss = _error(student, teacher, shared)  # epoch 1's inputs, the teacher's labels
    assert losses[1] == pytest.approx(true_loss, rel=1e-3)
    assert teacher.training and not student.a.values.requires_grad


def test_every_layer_targets_each_hidden_state():
    """output=every_layer stacks a BERT's per-layer hidden states (padding masked across them);
    training toward them lowers the last layer's error too."""
    teacher = tiny_bert()
    student = copy.deepcopy(teacher)
    sk.sparsify_(student, "2:4")
    mask = torch.ones(4, 12, dtype=torch.long)
    mask[0, 8:] = 0
    batches = [{"input_ids": torch.randint(0, 64, (4, 12)), "attention_mask": mask}]
    stacked = sk.prune.every_layer(teacher, batches[0])
    assert stacked.shape == (2, 4, 12, 32)
    torch.testing.assert_close(stacked[-1], teacher(**batches[0]).last_hidden_state)

    def last_error():
        with torch.no_grad():
            got = student(**batches[0]).last_hidden_state
            return float(
                (got - teacher(**batches[0]).last_hidden_state)[mask.bool()].square().mean()
            )

    before = last_error()
    losses = sk.prune.distill_(
        student, teacher, batches, epochs=15, lr=3e-3, output=sk.prune.every_layer
    )
    assert losses[-1] < losses[0] and last_error() < 0.7 * before


def test_fresh_batches_each_epoch_one_optimizer():
    """batches as a function of the epoch: each epoch's inputs are new (the teacher labels
    them), on_epoch sees every epoch, and the error still falls."""
    teacher, student, fixed = _pair()
    calls, seen = [], []

    def batches(epoch):
        calls.append(epoch)
        g = torch.Generator().manual_seed(epoch)
        return [{"x": torch.randn(24, 32, generator=g, dtype=torch.float64)} for _ in range(3)]

    before = _error(student, teacher, fixed)
    losses = sk.prune.distill_(
        student, teacher, batches, epochs=12, lr=3e-3, on_epoch=lambda e, loss: seen.append(e)
    )
    assert calls == list(range(12)) and seen == list(range(12)) and len(losses) == 12
    assert _error(student, teacher, fixed) < 0.5 * before  # generalises to unseen inputs
    with pytest.raises(ValueError, match=r"batches\(0\) returned no batch"):
        sk.prune.distill_(student, teacher, lambda epoch: [], epochs=1)
    with pytest.raises(TypeError, match="on_epoch must be callable"):
        sk.prune.distill_(student, teacher, fixed, on_epoch=3)


def test_word_mixes():
    import random

    from sparsekernels.models.sentences import CALIBRATION, word_mixes

    mixes = word_mixes(CALIBRATION, 50, random.Random(0))
    assert len(mixes) == 50 and mixes == word_mixes(CALIBRATION, 50, random.Random(0))
    words = {w for s in CALIBRATION for w in s.split()}
    assert all(m and set(m.split()) <= words for m in mixes)
    assert len(set(mixes) - set(CALIBRATION)) > 40  # mostly new sentences
    with pytest.raises(ValueError, match="at least two"):
        word_mixes(["one sentence"], 3, random.Random(0))


def test_also_trains_norms_and_biases():
    """`also` adds dense parameters to the training (norms_and_biases: every LayerNorm and
    bias); the masks still never move, and the extra freedom lowers the error further."""
    teacher, student, batches = _pair()
    plain = copy.deepcopy(student)
    masks = {k: v.clone() for k, v in student.state_dict().items() if "indices" in k}
    extra = sk.prune.norms_and_biases(student)
    assert {id(p) for p in extra} == {id(student.a.bias), id(student.b.bias)}
    bias = student.a.bias.detach().clone()
    sk.prune.distill_(plain, teacher, batches, epochs=10, lr=3e-3)
    sk.prune.distill_(student, teacher, batches, epochs=10, lr=3e-3, also=extra)
    assert not torch.equal(student.a.bias, bias)
    assert _error(student, teacher, batches) < _error(plain, teacher, batches)
    assert all(torch.equal(v, masks[k]) for k, v in student.state_dict().items() if k in masks)
    with pytest.raises(ValueError, match="also must hold parameters of the student"):
        sk.prune.distill_(student, teacher, batches, also=[teacher.a.bias])


def test_norms_and_biases_of_a_transformer():
    model = tiny_bert()
    found = {id(p) for p in sk.prune.norms_and_biases(model)}
    norms = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert norms and all(id(m.weight) in found and id(m.bias) in found for m in norms)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert all(id(m.bias) in found and id(m.weight) not in found for m in linears)


def test_head_models_match_their_logits_by_default():
    """A Hugging Face head model (BertForMaskedLM) has no last_hidden_state: the default output
    raised AttributeError on its ModelOutput; it matches the logits now."""
    teacher = tiny_bert(cls_name="BertForMaskedLM").double()
    student = copy.deepcopy(teacher)
    sk.sparsify_(student, "2:4")
    batches = [{"input_ids": torch.randint(0, 64, (2, 9))} for _ in range(2)]

    def logits_error():
        with torch.no_grad():
            return sum(
                float((student(**b).logits - teacher(**b).logits).square().mean()) for b in batches
            )

    before = logits_error()
    losses = sk.prune.distill_(student, teacher, batches, epochs=5, lr=3e-3)
    assert losses[-1] < losses[0] and logits_error() < before


def test_outputs_without_a_tensor_are_named():
    class Pair(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)

        def forward(self, x):
            return {"y": self.a(x)}

    teacher = Pair().double()
    student = copy.deepcopy(teacher)
    sk.sparsify_(student, "2:4")
    with pytest.raises(TypeError, match="no last_hidden_state or logits tensor: give distill_"):
        sk.prune.distill_(student, teacher, [{"x": torch.randn(3, 8, dtype=torch.float64)}])
