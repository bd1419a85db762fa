"""Oracles: CLIP zero-shot (tiny random open_clip model, no downloads), classifier judge, zoo rules."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from genEval.data.standard import CIFAR10_CLASSES
from genEval.interfaces import Judgement, Oracle
from oracles.classifier import ClassifierOracle
from oracles.zoo import ZooOracle, majority_vote
from tests.support.assets import ROOT

CONF = ROOT / "conf" / "oracle"
TINY = "genEval-test-tiny-clip"
CLASSES = ["cat", "dog", "ship"]


# ------------------------------------------------------------------------------------------- helpers
class FixedLogits(nn.Module):
    """A classifier that ignores the image and returns row ``i`` of ``logits`` for sample ``i``."""

    def __init__(self, logits: list[list[float]]) -> None:
        super().__init__()
        self.register_buffer("table", torch.tensor(logits, dtype=torch.float32))
        self.num_classes = self.table.shape[1]

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.table[: images.shape[0]].to(images.device)


def onehot_logits(preds: list[int], num_classes: int = 3, margin: float = 4.0) -> list[list[float]]:
    return [[margin if c == p else 0.0 for c in range(num_classes)] for p in preds]


def member(preds: list[int], threshold: float | None = None, name: str | None = None) -> ClassifierOracle:
    return ClassifierOracle(FixedLogits(onehot_logits(preds)), threshold=threshold, name=name)


IMAGES = torch.rand(4, 3, 8, 8)


# ---------------------------------------------------------------------------------------- classifier
def test_classifier_oracle_known_answers():
    logits = [[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 3.0], [1.0, 1.0, 1.0]]
    o = ClassifierOracle(FixedLogits(logits))
    assert isinstance(o, Oracle)
    o.prepare(CLASSES)
    j = o.judge(IMAGES, torch.tensor([0, 0, 2, 1]))
    assert isinstance(j, Judgement)
    assert j.accept.dtype == torch.bool and j.predictions.dtype == torch.long
    assert j.accept.tolist() == [True, False, True, False]  # row 3 ties -> argmax 0, not 1
    assert j.predictions.tolist() == [0, 1, 2, 0]
    expected = torch.tensor(logits).softmax(-1)[torch.arange(4), torch.tensor([0, 0, 2, 1])]
    torch.testing.assert_close(j.scores, expected)
    assert o.name == "classifier:FixedLogits"
    assert "threshold=None" in repr(o) and "num_classes=3" in repr(o)


def test_classifier_oracle_threshold():
    # p(label) for the accepted rows: softmax([2,0,0])[0] = 0.787, softmax([0,0,3])[2] = 0.909
    o = ClassifierOracle(FixedLogits([[2.0, 0, 0], [0, 1.0, 0], [0, 0, 3.0], [1.0, 1, 1]]), threshold=0.8)
    j = o.judge(IMAGES, torch.tensor([0, 0, 2, 1]))
    assert j.accept.tolist() == [False, False, True, False]
    assert ClassifierOracle(FixedLogits([[5.0, 0, 0]]), threshold=0.0).judge(
        IMAGES[:1], torch.tensor([1])
    ).accept.tolist() == [False]  # a threshold never rescues a wrong argmax


@pytest.mark.parametrize("bad", [-0.1, 1.5, "high"])
def test_threshold_validation(bad):
    with pytest.raises(ValueError, match=r"threshold must"):
        ClassifierOracle(FixedLogits([[1.0, 0.0]]), threshold=bad)
    with pytest.raises(ValueError, match=r"threshold must"):
        ZooOracle([member([0])], threshold=bad)


def test_classifier_oracle_class_count_mismatch():
    o = ClassifierOracle(FixedLogits([[1.0, 0.0, 0.0]]), name="small")
    with pytest.raises(ValueError, match=r"oracle small has 3 classes but the dataset has 10"):
        o.prepare([str(i) for i in range(10)])


def test_classifier_oracle_input_errors():
    with pytest.raises(ValueError, match=r"no positive integer `num_classes`"):
        ClassifierOracle(nn.Linear(3, 2))
    with pytest.raises(TypeError, match=r"needs an nn.Module"):
        ClassifierOracle(lambda x: x)
    o = member([0, 1])
    with pytest.raises(ValueError, match=r"label 3 is outside the 3 classes"):
        o.judge(IMAGES[:2], torch.tensor([0, 3]))
    with pytest.raises(ValueError, match=r"expected labels shaped \(2,\)"):
        o.judge(IMAGES[:2], torch.tensor([0]))
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        o.judge(IMAGES[:2] * 255, torch.tensor([0, 1]))
    wrong = ClassifierOracle(FixedLogits([[1.0, 0.0, 0.0]]))
    wrong.num_classes = 4
    with pytest.raises(ValueError, match=r"returned logits shaped \(1, 3\), expected \(1, 4\)"):
        wrong.judge(IMAGES[:1], torch.tensor([0]))


def test_judge_builds_no_graph():
    clf = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 3))
    clf.num_classes = 3
    x = IMAGES.clone().requires_grad_(True)
    j = ClassifierOracle(clf).judge(x, torch.tensor([0, 1, 2, 0]))
    assert not j.scores.requires_grad


# ----------------------------------------------------------------------------------------------- zoo
def test_majority_vote_ties_go_to_lowest_class():
    preds = torch.tensor([[2, 1, 0, 4], [1, 1, 3, 2], [2, 0, 3, 4], [1, 0, 0, 2]])  # (M=4, B=4)
    # col 0: 2,1,2,1 tie -> 1; col 1: 1,1,0,0 tie -> 0; col 2: 0,3,3,0 tie -> 0; col 3: 4,2,4,2 tie -> 2
    assert majority_vote(preds).tolist() == [1, 0, 0, 2]
    assert majority_vote(torch.tensor([[2, 5], [2, 1], [0, 5]])).tolist() == [2, 5]


def test_zoo_rules_all_vs_majority():
    labels = torch.tensor([0, 1, 2, 0])
    a = member([0, 1, 2, 1], name="a")  # accepts samples 0, 1, 2
    b = member([0, 1, 0, 2], name="b")  # accepts samples 0, 1
    c = member([0, 2, 0, 0], name="c")  # accepts samples 0, 3
    zoo_all = ZooOracle([a, b, c])
    zoo_maj = ZooOracle([a, b, c], rule="majority")
    assert zoo_all.name == "zoo(all):[a, b, c]" and zoo_maj.name == "zoo(majority):[a, b, c]"
    assert isinstance(zoo_all, Oracle)
    ja, jm = zoo_all.judge(IMAGES, labels), zoo_maj.judge(IMAGES, labels)
    assert ja.accept.tolist() == [True, False, False, False]
    assert jm.accept.tolist() == [True, True, False, False]  # 3/3, 2/3, 1/3, 1/3
    # predictions: majority vote (sample 2: votes 2,0,0 -> 0; sample 3: votes 1,2,0 tie -> 0)
    assert ja.predictions.tolist() == [0, 1, 0, 0]
    expected = torch.stack([m.judge(IMAGES, labels).scores for m in (a, b, c)]).mean(0)
    torch.testing.assert_close(ja.scores, expected)
    # strict majority: with two members, one accepting is not a majority
    pair = ZooOracle([a, c], rule="majority")
    assert pair.judge(IMAGES, labels).accept.tolist() == [True, False, False, False]


def test_zoo_thresholds():
    labels = torch.tensor([0, 1])
    sure = ClassifierOracle(FixedLogits([[9.0, 0, 0], [0, 9.0, 0]]), name="sure")
    unsure = ClassifierOracle(FixedLogits([[1.0, 0, 0], [0, 3.0, 0]]), name="unsure")  # p=0.58, 0.91
    assert ZooOracle([sure, unsure]).judge(IMAGES[:2], labels).accept.tolist() == [True, True]
    strict = ClassifierOracle(FixedLogits([[1.0, 0, 0], [0, 3.0, 0]]), threshold=0.7)
    assert ZooOracle([sure, strict]).judge(IMAGES[:2], labels).accept.tolist() == [False, True]
    # zoo-level threshold acts on the mean score: (1.0 + 0.58) / 2 = 0.79, (1.0 + 0.91) / 2 = 0.95
    assert ZooOracle([sure, unsure], threshold=0.9).judge(IMAGES[:2], labels).accept.tolist() == [False, True]


def test_zoo_errors():
    with pytest.raises(ValueError, match=r"rule must be one of all, majority .*got 'any'"):
        ZooOracle([member([0])], rule="any")
    with pytest.raises(ValueError, match=r"at least one member"):
        ZooOracle([])
    with pytest.raises(TypeError, match=r"member 1 is a str"):
        ZooOracle([member([0]), "clip"])


def test_zoo_prepare_forwards_to_members():
    zoo = ZooOracle([member([0]), ClassifierOracle(FixedLogits([[0.0] * 10]), name="ten")])
    with pytest.raises(ValueError, match=r"oracle ten has 10 classes but the dataset has 3"):
        zoo.prepare(CLASSES)
    ok = ZooOracle([member([0]), member([1])])
    ok.prepare(CLASSES)
    assert all(m.class_names == CLASSES for m in ok.members)


def test_zoo_to_moves_members():
    zoo = ZooOracle([member([0, 1]), member([1, 1])])
    assert isinstance(zoo.members, nn.ModuleList)
    zoo.to(torch.float64)
    assert all(m.classifier.table.dtype == torch.float64 for m in zoo.members)
    assert "rule='all'" in repr(zoo) and "FixedLogits" in repr(zoo)


@pytest.mark.gpu
def test_zoo_to_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    zoo = ZooOracle([member([0, 1]), member([1, 1])]).to("cuda")
    assert all(m.classifier.table.is_cuda for m in zoo.members)
    j = zoo.judge(IMAGES[:2].cuda(), torch.tensor([0, 1], device="cuda"))
    assert j.accept.is_cuda and j.accept.tolist() == [False, True]


# ---------------------------------------------------------------------------------------------- CLIP
@pytest.fixture(scope="module")
def tiny_clip_name(tmp_path_factory) -> str:
    """Register a tiny ViT CLIP config with open_clip (random init, no download)."""
    import open_clip

    cfg = {
        "embed_dim": 32,
        "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "patch_size": 8},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 4, "layers": 2},
    }
    path = tmp_path_factory.mktemp("open_clip_cfg") / f"{TINY}.json"
    path.write_text(json.dumps(cfg))
    open_clip.add_model_config(path)
    assert TINY in open_clip.list_models()
    return TINY


def make_clip(name: str, **kwargs):
    from oracles.clip import CLIPOracle

    torch.manual_seed(0)
    return CLIPOracle(model_name=name, pretrained=kwargs.pop("pretrained", None), **kwargs)


def manual_logits(oracle, images: torch.Tensor, class_names: list[str], templates: list[str]) -> torch.Tensor:
    """Zero-shot logits written out longhand (images already at the model's size)."""
    import open_clip

    model, tok = oracle.model, open_clip.get_tokenizer(oracle.model_name)
    mean = torch.tensor(open_clip.OPENAI_DATASET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(open_clip.OPENAI_DATASET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        img = F.normalize(model.encode_image((images - mean) / std), dim=-1)
        per_class = []
        for c in class_names:
            e = F.normalize(model.encode_text(tok([t.replace("{}", c) for t in templates])), dim=-1)
            per_class.append(F.normalize(e.mean(0), dim=-1))
        return model.logit_scale.exp() * img @ torch.stack(per_class).T


def test_clip_zero_shot_matches_longhand(tiny_clip_name):
    o = make_clip(tiny_clip_name)
    assert isinstance(o, Oracle)
    assert o.name == f"clip:{tiny_clip_name}:random" and o.templates == ("an image of {}",)
    assert o.image_size == (32, 32)
    o.prepare(CLASSES)
    x = torch.rand(5, 3, 32, 32)
    expected = manual_logits(o, x, CLASSES, ["an image of {}"])
    torch.testing.assert_close(o.logits(x), expected, rtol=1e-4, atol=1e-4)
    labels = torch.tensor([0, 1, 2, 0, 1])
    j = o.judge(x, labels)
    probs = expected.softmax(-1)
    torch.testing.assert_close(j.scores, probs[torch.arange(5), labels], rtol=1e-4, atol=1e-5)
    assert j.predictions.tolist() == probs.argmax(-1).tolist()
    assert j.accept.tolist() == (probs.argmax(-1) == labels).tolist()
    assert "templates=['an image of {}']" in repr(o) and "threshold=None" in repr(o)


def test_clip_templates_average_and_placeholders(tiny_clip_name):
    templates = ["an image of {}", "a blurry photo of a {}."]
    o = make_clip(tiny_clip_name, templates=templates)
    o.prepare(CLASSES)
    x = torch.rand(3, 3, 32, 32)
    torch.testing.assert_close(o.logits(x), manual_logits(o, x, CLASSES, templates), rtol=1e-4, atol=1e-4)
    # "{class}" and "{}" name the same slot
    o2 = make_clip(tiny_clip_name, templates=["an image of {class}", "a blurry photo of a {class}."])
    torch.testing.assert_close(o2.class_embeddings(CLASSES), o.class_embeddings(CLASSES))
    # averaging differs from either single template
    single = make_clip(tiny_clip_name).class_embeddings(CLASSES)
    assert not torch.allclose(single, o.class_embeddings(CLASSES))


def test_clip_text_embeddings_are_cached(tiny_clip_name, monkeypatch):
    o = make_clip(tiny_clip_name, prompt_cache=False)  # the in-memory cache alone (the disk cache: below)
    calls = []
    encode = o.model.encode_text
    monkeypatch.setattr(o.model, "encode_text", lambda *a, **k: calls.append(1) or encode(*a, **k))
    o.prepare(CLASSES)
    o.prepare(list(CLASSES))
    for _ in range(3):
        o.judge(torch.rand(2, 3, 32, 32), torch.tensor([0, 1]))
    assert len(calls) == 1
    assert list(o.text_cache) == [(tuple(CLASSES), ("an image of {}",))]
    o.prepare(["plane", "car"])
    assert len(calls) == 2 and len(o.text_cache) == 2
    o.prepare(CLASSES)
    assert len(calls) == 2


def _count_encodes(monkeypatch, oracle) -> list[int]:
    calls: list[int] = []
    encode = oracle.model.encode_text
    monkeypatch.setattr(oracle.model, "encode_text", lambda *a, **k: calls.append(1) or encode(*a, **k))
    return calls


def test_clip_prompt_cache_is_read_at_the_next_start(tiny_clip_name, monkeypatch, tmp_path):
    """Issue 20: the class-embedding matrix is encoded once and read back from $GENEVAL_CACHE/clip_prompts."""
    from oracles.clip import PROMPT_CACHE

    monkeypatch.setenv("GENEVAL_CACHE", str(tmp_path))
    first = make_clip(tiny_clip_name, templates="simple")
    encoded = _count_encodes(monkeypatch, first)
    first.prepare(CLASSES)
    assert len(encoded) > 0
    files = list((tmp_path / PROMPT_CACHE).glob("*.safetensors"))
    assert len(files) == 1 and files[0].name.startswith(f"{tiny_clip_name}-3x7-")
    second = make_clip(tiny_clip_name, templates="simple")  # a new process would build the same oracle
    read = _count_encodes(monkeypatch, second)
    second.prepare(CLASSES)
    assert read == []  # nothing encoded: read from disk
    assert torch.equal(second.class_embeddings(CLASSES), first.class_embeddings(CLASSES))
    x = torch.rand(3, 3, 32, 32)
    assert torch.equal(second.logits(x), first.logits(x))


@pytest.mark.parametrize(
    "change",
    ["templates", "class_names", "weights", "activation", "precision", "switched_off"],
)
def test_clip_prompt_cache_key_holds_every_setting(tiny_clip_name, monkeypatch, tmp_path, change):
    from oracles.clip import CLIPOracle

    monkeypatch.setenv("GENEVAL_CACHE", str(tmp_path))
    make_clip(tiny_clip_name, templates="simple").prepare(CLASSES)
    names, kwargs = list(CLASSES), {"templates": "simple"}
    if change == "templates":
        from oracles.clip import named_templates

        kwargs["templates"] = [f"{t}!" for t in named_templates("simple")]  # as many prompts, other words
    elif change == "class_names":
        names = ["cat", "dog", "boat"]
    elif change == "activation":
        kwargs["quick_gelu"] = True
    elif change == "precision":
        kwargs["precision"] = "bf16"
    elif change == "switched_off":
        kwargs["prompt_cache"] = False
    if change == "weights":
        torch.manual_seed(1)
        other = CLIPOracle(model_name=tiny_clip_name, pretrained=None, **kwargs)
    else:
        other = make_clip(tiny_clip_name, **kwargs)
    encoded = _count_encodes(monkeypatch, other)
    other.prepare(names)
    assert len(encoded) > 0  # a different key: encoded, never the other setting's embeddings


def test_clip_prompt_cache_refuses_damaged_or_foreign_files(tiny_clip_name, monkeypatch, tmp_path, caplog):
    from safetensors.torch import save_file

    from oracles.clip import PROMPT_CACHE

    monkeypatch.setenv("GENEVAL_CACHE", str(tmp_path))
    good = make_clip(tiny_clip_name)
    good.prepare(CLASSES)
    (path,) = (tmp_path / PROMPT_CACHE).glob("*.safetensors")
    expected = good.class_embeddings(CLASSES)
    save_file({"class_embeddings": torch.zeros(expected.shape)}, path, metadata={"key": "{}"})  # another key
    again = make_clip(tiny_clip_name)
    encoded = _count_encodes(monkeypatch, again)
    again.prepare(CLASSES)
    assert len(encoded) > 0 and torch.equal(again.class_embeddings(CLASSES), expected)
    path.write_bytes(b"not a safetensors file")
    with caplog.at_level("WARNING", logger="oracles.clip"):
        third = make_clip(tiny_clip_name)
        third.prepare(CLASSES)
    assert "is unreadable" in caplog.text and torch.equal(third.class_embeddings(CLASSES), expected)
    fourth = make_clip(tiny_clip_name)
    fourth_calls = _count_encodes(monkeypatch, fourth)
    fourth.prepare(CLASSES)
    assert fourth_calls == []  # the recomputed matrix was written back in place of the damaged file


def test_clip_checkpoint_file_weights_are_keyed_by_content(tiny_clip_name, monkeypatch, tmp_path):
    import shutil

    from genEval.fileio import sha256_file
    from oracles.clip import CLIPOracle

    monkeypatch.setenv("GENEVAL_CACHE", str(tmp_path / "cache"))
    a = tmp_path / "a" / "open_clip_pytorch_model.bin"
    a.parent.mkdir()
    torch.save(make_clip(tiny_clip_name).model.state_dict(), a)
    b = tmp_path / "b.bin"
    shutil.copy(a, b)
    first = CLIPOracle(model_name=tiny_clip_name, pretrained=str(a))
    assert first.disk_cache.weights_id() == f"file-sha256:{sha256_file(a)}"
    first.prepare(CLASSES)
    copy = CLIPOracle(model_name=tiny_clip_name, pretrained=str(b))
    calls = _count_encodes(monkeypatch, copy)
    copy.prepare(CLASSES)
    assert calls == []  # the same bytes under another name: the same weights


def test_clip_prompt_encoding_logs_progress_with_an_eta(tiny_clip_name, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("GENEVAL_CACHE", str(tmp_path))
    monkeypatch.setattr("oracles.clip.prompts._PROGRESS_EVERY", 0.0)
    monkeypatch.setattr("oracles.clip.prompts._TEXT_CHUNK", 7)  # one class (7 templates) per text-encoder call
    o = make_clip(tiny_clip_name, templates="simple")
    with caplog.at_level("INFO", logger="oracles.clip"):
        o.prepare(CLASSES)
    lines = [r.getMessage() for r in caplog.records]
    assert any("encoding 21 prompts (3 classes x 7 templates)" in m for m in lines)
    progress = [m for m in lines if "prompts/s), ETA" in m]
    assert [m.split("encoded ")[1].split(" prompts")[0] for m in progress] == ["7/21", "14/21"]
    assert any("class embeddings cached in" in m for m in lines)


def test_clip_threshold(tiny_clip_name):
    o = make_clip(tiny_clip_name)
    o.prepare(CLASSES)
    x = torch.rand(4, 3, 32, 32)
    j = o.judge(x, o.judge(x, torch.zeros(4, dtype=torch.long)).predictions)  # label = own prediction
    assert j.accept.all()
    cut = float(j.scores.median())
    o_thr = make_clip(tiny_clip_name, threshold=cut)
    o_thr.prepare(CLASSES)
    jt = o_thr.judge(x, j.predictions)
    assert jt.accept.tolist() == (j.scores >= cut).tolist()
    o_one = make_clip(tiny_clip_name, threshold=1.0)
    o_one.prepare(CLASSES)
    assert not o_one.judge(x, j.predictions).accept.any()  # three classes: p(label) < 1 always
    with pytest.raises(ValueError, match=r"threshold must be a number in \[0, 1\].*got 2.0"):
        make_clip(tiny_clip_name, threshold=2.0)


def test_clip_grayscale_and_resize(tiny_clip_name):
    o = make_clip(tiny_clip_name)
    o.prepare(CLASSES)
    gray = torch.rand(2, 1, 32, 32)
    labels = torch.tensor([0, 2])
    torch.testing.assert_close(o.judge(gray, labels).scores, o.judge(gray.repeat(1, 3, 1, 1), labels).scores)
    # other sizes are resized (shortest side) and centre-cropped to the model's 32 px
    assert o.preprocess(torch.rand(2, 3, 16, 24)).shape == (2, 3, 32, 32)
    assert o.preprocess(torch.rand(2, 1, 64, 64)).shape == (2, 3, 32, 32)
    flat = torch.full((1, 3, 32, 32), 0.5)
    expected = (0.5 - torch.tensor(o.mean.flatten().tolist())) / o.std.flatten()
    torch.testing.assert_close(o.preprocess(flat)[0, :, 0, 0], expected)
    with pytest.raises(ValueError, match=r"expected 1 or 3 image channels, got 2"):
        o.judge(torch.rand(1, 2, 32, 32), torch.tensor([0]))


def test_clip_judge_errors(tiny_clip_name):
    o = make_clip(tiny_clip_name)
    with pytest.raises(RuntimeError, match=r"call prepare\(class_names\) before judge"):
        o.judge(torch.rand(1, 3, 32, 32), torch.tensor([0]))
    o.prepare(CLASSES)
    with pytest.raises(ValueError, match=r"label 5 is outside the 3 classes"):
        o.judge(torch.rand(1, 3, 32, 32), torch.tensor([5]))
    with pytest.raises(ValueError, match=r"class names must be non-empty strings"):
        o.prepare(["cat", ""])
    with pytest.raises(ValueError, match=r"needs the dataset's class names"):
        o.prepare([])


def test_clip_checkpoint_round_trip(tiny_clip_name, tmp_path):
    o = make_clip(tiny_clip_name)
    path = tmp_path / "open_clip_pytorch_model.bin"
    torch.save(o.model.state_dict(), path)
    torch.manual_seed(123)  # a different random init, overwritten by the checkpoint
    from oracles.clip import CLIPOracle

    o2 = CLIPOracle(model_name=tiny_clip_name, pretrained=str(path))
    assert o2.name == f"clip:{tiny_clip_name}:open_clip_pytorch_model.bin"
    x, labels = torch.rand(4, 3, 32, 32), torch.tensor([0, 1, 2, 1])
    o.prepare(CLASSES)
    o2.prepare(CLASSES)
    j1, j2 = o.judge(x, labels), o2.judge(x, labels)
    torch.testing.assert_close(j1.scores, j2.scores)
    assert j1.predictions.tolist() == j2.predictions.tolist()
    # a checkpoint of another architecture is refused with the file named
    bad = tmp_path / "other.bin"
    torch.save({"visual.conv1.weight": torch.zeros(1)}, bad)
    with pytest.raises(ValueError, match=r"other.bin' does not fit open_clip model"):
        CLIPOracle(model_name=tiny_clip_name, pretrained=str(bad))


def test_clip_construction_errors(tmp_path):
    from oracles.clip import CLIPOracle

    with pytest.raises(ValueError, match=r"no model named 'ViT-B-33'.*ViT-B-32.*list_models"):
        CLIPOracle(model_name="ViT-B-33")
    with pytest.raises(
        ValueError,
        match=r"'laion5b' is neither a pretrained tag of ViT-B-32.*openai.*"
        r"laion2b_s34b_b79k",
    ):
        CLIPOracle(model_name="ViT-B-32", pretrained="laion5b")
    missing = tmp_path / "nowhere" / "open_clip_pytorch_model.bin"
    with pytest.raises(FileNotFoundError, match=r"nowhere/open_clip_pytorch_model.bin"):
        CLIPOracle(model_name="ViT-B-32", pretrained=str(missing))
    with pytest.raises(ValueError, match=r"template 'an image' has no class placeholder"):
        CLIPOracle(model_name="ViT-B-32", templates=["an image"])
    with pytest.raises(ValueError, match=r"templates is empty"):
        CLIPOracle(model_name="ViT-B-32", templates=[])
    with pytest.raises(ValueError, match=r"unknown precision 'fp8'; choose one of fp32, fp16, bf16"):
        CLIPOracle(model_name="ViT-B-32", precision="fp8")


def _no_network(monkeypatch):
    """Fail the test if huggingface_hub's HTTP session or open_clip's downloader is used at all."""
    import open_clip
    from huggingface_hub import utils as hf_utils

    def forbidden(*args, **kwargs):
        raise AssertionError("a network request was made")

    monkeypatch.setattr(hf_utils, "get_session", forbidden)
    monkeypatch.setattr(open_clip, "download_pretrained", forbidden)


def test_hub_problem_offline_flag_answers_without_a_request(monkeypatch):
    from genEval.checkpoints import hub_problem

    _no_network(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_problem() == "HF_HUB_OFFLINE is set"


def test_hub_problem_reaches_a_server_once_and_names_an_unreachable_one(monkeypatch):
    import http.server
    import socket
    import threading

    from genEval.checkpoints import hub_problem

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert hub_problem(f"http://127.0.0.1:{server.server_address[1]}/") is None
    finally:
        server.shutdown()
        server.server_close()
    with socket.socket() as sock:  # a port nobody listens on: connection refused at once
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    why = hub_problem(f"http://127.0.0.1:{closed}/", timeout=2)
    assert why.startswith(f"http://127.0.0.1:{closed}/ is unreachable (") and "ConnectError" in why


def test_clip_offline_tag_fails_at_once_naming_the_local_file_option(monkeypatch, tmp_path):
    """Issue 20: HF_HUB_OFFLINE=1 (or an unreachable hub) without cached weights is one user error, no retries."""
    from genEval.checkpoints import WeightsUnavailable
    from oracles.clip import CLIPOracle

    _no_network(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        WeightsUnavailable,
        match=r"(?s)'openai' weights of ViT-B-32 are not on this machine.*HF_HUB_OFFLINE is set.*"
        r"oracle.pretrained=/path/to/open_clip_pytorch_model.bin oracle.quick_gelu=true",
    ) as err:
        CLIPOracle(model_name="ViT-B-32", pretrained="openai", cache_dir=str(tmp_path))
    assert isinstance(err.value, FileNotFoundError)  # a user error: `geneval` prints it without a traceback
    monkeypatch.delenv("HF_HUB_OFFLINE")
    unreachable = "https://huggingface.co is unreachable (x)"
    monkeypatch.setattr("oracles.clip.loading.hub_problem", lambda url=None: unreachable)
    with pytest.raises(WeightsUnavailable, match=r"huggingface.co is unreachable \(x\)\. Download the checkpoint"):
        CLIPOracle(model_name="ViT-B-32", pretrained="openai", cache_dir=str(tmp_path))


def test_clip_download_failure_with_a_reachable_hub_is_a_user_error(monkeypatch):
    import open_clip

    from genEval.checkpoints import WeightsUnavailable
    from oracles.clip import CLIPOracle

    def refused(*args, **kwargs):
        raise ConnectionError("403 gated repository")

    monkeypatch.setattr("oracles.clip.loading.hub_problem", lambda url=None: None)
    monkeypatch.setattr(open_clip, "download_pretrained", refused)
    with pytest.raises(
        WeightsUnavailable, match=r"(?s)cannot download.*ConnectionError: 403 gated.*oracle.pretrained="
    ):
        CLIPOracle(model_name="ViT-B-32", pretrained="openai")


def test_clip_offline_tag_uses_the_hugging_face_cache(monkeypatch, tmp_path, tiny_clip_name):
    """Offline with the tag's weights already downloaded: they load from the cache, with the tag's settings."""
    import open_clip
    from safetensors.torch import save_file

    from oracles.clip import CLIPOracle

    saved = make_clip(tiny_clip_name)
    snap = tmp_path / "models--org--tiny" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (tmp_path / "models--org--tiny" / "refs").mkdir()
    (tmp_path / "models--org--tiny" / "refs" / "main").write_text("abc123")
    save_file({k: v.contiguous() for k, v in saved.model.state_dict().items()}, snap / "open_clip_model.safetensors")
    tag = {"hf_hub": "org/tiny/", "quick_gelu": True, "mean": (0.5, 0.5, 0.5), "std": (0.25, 0.25, 0.25)}
    real_cfg = open_clip.get_pretrained_cfg
    monkeypatch.setattr(open_clip, "get_pretrained_cfg", lambda m, t: tag if t == "tinytag" else real_cfg(m, t))
    _no_network(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.manual_seed(99)  # another random init, replaced by the cached weights
    o = CLIPOracle(model_name=tiny_clip_name, pretrained="tinytag", cache_dir=str(tmp_path))
    assert o.name == f"clip:{tiny_clip_name}:tinytag"
    for k, v in saved.model.state_dict().items():
        torch.testing.assert_close(o.model.state_dict()[k], v)
    assert o.mean.flatten().tolist() == [0.5] * 3 and o.std.flatten().tolist() == [0.25] * 3  # the tag's own
    assert any(type(m).__name__ == "QuickGELU" for m in o.model.modules())  # the tag was trained with QuickGELU


def test_clip_official_tag_uses_quick_gelu(monkeypatch, tiny_clip_name):
    """OpenAI weights were trained with QuickGELU; the tag's setting must reach open_clip."""
    import open_clip

    from oracles.clip import CLIPOracle

    seen = {}
    tiny = open_clip.create_model(tiny_clip_name)
    monkeypatch.setattr("oracles.clip.loading.hub_problem", lambda url=None: None)  # the hub answers

    def fake_create(name, pretrained=None, **kwargs):
        seen.update(name=name, pretrained=pretrained, **kwargs)
        return tiny

    monkeypatch.setattr(open_clip, "download_pretrained", lambda cfg, cache_dir=None: "/cache/model.bin")
    monkeypatch.setattr(open_clip, "create_model", fake_create)
    monkeypatch.setattr(open_clip, "get_tokenizer", lambda name: open_clip.SimpleTokenizer())
    o = CLIPOracle(model_name="ViT-B-32", pretrained="openai", cache_dir="/somewhere")
    assert o.name == "clip:ViT-B-32:openai"
    assert seen["pretrained"] == "openai" and seen["force_quick_gelu"] is True
    assert seen["cache_dir"] == "/somewhere"
    CLIPOracle(model_name="ViT-B-32", pretrained="laion2b_s34b_b79k")
    assert seen["force_quick_gelu"] is False
    CLIPOracle(model_name="ViT-B-32", pretrained="laion2b_s34b_b79k", quick_gelu=True)
    assert seen["force_quick_gelu"] is True


@pytest.mark.gpu
def test_clip_on_cuda(tiny_clip_name):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    o = make_clip(tiny_clip_name)
    o.prepare(CLASSES)
    x, labels = torch.rand(3, 3, 24, 24), torch.tensor([0, 1, 2])
    cpu = o.judge(x, labels)
    o.to("cuda")
    assert next(iter(o.text_cache.values())).is_cuda and o.mean.is_cuda
    gpu = o.judge(x.cuda(), labels.cuda())
    assert gpu.accept.is_cuda
    torch.testing.assert_close(gpu.scores.cpu(), cpu.scores, rtol=1e-3, atol=1e-4)
    half = make_clip(tiny_clip_name, precision="fp16").to("cuda")
    half.prepare(CLASSES)
    scores = half.judge(x.cuda(), labels.cuda()).scores.cpu()
    torch.testing.assert_close(scores, cpu.scores, rtol=0, atol=2e-2)


# ------------------------------------------------------------------------------------------- configs
def _load(name: str):
    from omegaconf import OmegaConf

    from tests.support.assets import ASSETS

    cfg = OmegaConf.merge({"assets": str(ASSETS)}, {"oracle": OmegaConf.load(CONF / f"{name}.yaml")})
    return cfg.oracle


def _targets(node) -> list:
    """Every ``_target_`` node in a config tree."""
    from omegaconf import DictConfig, ListConfig

    found = []
    if isinstance(node, DictConfig):
        if "_target_" in node:
            found.append(node)
        for key in node:
            found += _targets(node[key])
    elif isinstance(node, ListConfig):
        for item in node:
            found += _targets(item)
    return found


@pytest.mark.parametrize(
    "name", ["clip", "clip_vit_b32", "clip_imagenet", "classifier", "digits_zoo", "cifar_resnet_zoo"]
)
def test_oracle_configs_resolve(name):
    """Each target exists and accepts exactly the keys its config gives it."""
    import inspect

    from hydra.utils import get_method
    from omegaconf import OmegaConf

    nodes = _targets(_load(name))
    assert nodes, f"{name}.yaml has no _target_"
    for node in nodes:
        fn = get_method(node._target_)
        keys = {k: None for k in node if k != "_target_"}
        inspect.signature(fn).bind(**keys)  # raises TypeError on a misspelt key
    OmegaConf.to_container(_load(name), resolve=True)  # ${assets} resolves


def test_clip_configs_instantiate(tiny_clip_name):
    from hydra.utils import instantiate

    from oracles.clip import CLIPOracle

    paper = _load("clip_vit_b32")
    assert (paper.model_name, paper.pretrained) == ("ViT-B-32", "openai")
    assert list(paper.templates) == ["an image of {}"]
    for name in ("clip_vit_b32", "clip", "clip_imagenet"):
        cfg = _load(name)
        cfg.model_name, cfg.pretrained = tiny_clip_name, None
        o = instantiate(cfg)
        assert isinstance(o, CLIPOracle) and len(o.templates) == (80 if name == "clip_imagenet" else len(cfg.templates))
        o.prepare(CLASSES)
        assert o.judge(torch.rand(2, 3, 32, 32), torch.tensor([0, 1])).accept.shape == (2,)


def test_zoo_config_instantiates_members():
    """Hydra builds the nested members list into a ZooOracle (classifiers swapped for quick random ones)."""
    from hydra.utils import instantiate

    cfg = _load("digits_zoo")
    assert [m.classifier.arch for m in cfg.members] == ["mlp", "wide_cnn"]
    assert all(m.classifier.seed == 1 for m in cfg.members) and cfg.rule == "all"
    for m in cfg.members:
        m.classifier = {"_target_": "genEval.classifiers.cifar_resnet", "depth": 20}
    zoo = instantiate(cfg)
    assert isinstance(zoo, ZooOracle) and isinstance(zoo.members, nn.ModuleList) and len(zoo.members) == 2
    zoo.prepare(CIFAR10_CLASSES)  # the members are CIFAR ResNets now
    assert zoo.judge(torch.rand(3, 3, 32, 32), torch.tensor([0, 1, 2])).accept.shape == (3,)


@pytest.mark.slow
def test_digits_zoo_instantiates_and_judges():
    from hydra.utils import instantiate

    from genEval.data.standard import DigitsData

    zoo = instantiate(_load("digits_zoo"))
    assert zoo.name == "zoo(all):[classifier:digits_mlp:seed1, classifier:digits_wide_cnn:seed1]"
    data = DigitsData(split="test")
    zoo.prepare(data.class_names)
    items = [data[i] for i in range(100)]
    x, y = torch.stack([it[0] for it in items]), torch.tensor([it[1] for it in items])
    assert zoo.judge(x, y).accept.float().mean() > 0.8  # both members are accurate on clean digits


def _cifar_pngs():
    import numpy as np
    from PIL import Image

    from tests.support.assets import asset

    files = sorted(asset("samples/foolbox").glob("cifar10_*.png"))
    x = (
        torch.stack(
            [torch.from_numpy(np.asarray(Image.open(f).convert("RGB")).copy()).permute(2, 0, 1) for f in files]
        ).float()
        / 255
    )
    return x, torch.tensor([int(f.stem.split("_")[-1]) for f in files])


@pytest.mark.weights
def test_cifar_resnet_zoo_on_real_weights():
    """Shared ResNet-32 / -56 get 19/20 and 20/20 of the lossless CIFAR PNGs (assets README)."""
    from hydra.utils import instantiate

    from tests.support.assets import asset

    asset("weights/cifar10-resnet")
    x, y = _cifar_pngs()
    assert len(y) == 20
    zoo = instantiate(_load("cifar_resnet_zoo"))
    zoo.prepare(["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"])
    per_member = [int(m.judge(x, y).accept.sum()) for m in zoo.members]
    assert per_member == [19, 20]
    j = zoo.judge(x, y)
    assert int(j.accept.sum()) == 19 and bool((j.scores > 0).all())
    single = instantiate(_load("classifier"))
    single.prepare(CIFAR10_CLASSES)
    assert int(single.judge(x, y).accept.sum()) == 20


# ------------------------------------------------------------------------------ oracle.reference (issue 10)
def test_every_oracle_has_a_validated_reference(tiny_clip_name):
    assert member([0]).reference == "label" and ZooOracle([member([0])]).reference == "label"
    assert make_clip(tiny_clip_name).reference == "label"
    picked = [
        ClassifierOracle(FixedLogits([[1.0, 0.0]]), reference="clean_prediction"),
        ZooOracle([member([0])], reference="clean_prediction"),
        make_clip(tiny_clip_name, reference="clean_prediction"),
    ]
    assert [o.reference for o in picked] == ["clean_prediction"] * 3
    assert all("reference='clean_prediction'" in repr(o) for o in picked)
    for build in (
        lambda r: ClassifierOracle(FixedLogits([[1.0, 0.0]]), reference=r),
        lambda r: ZooOracle([member([0])], reference=r),
        lambda r: make_clip(tiny_clip_name, reference=r),
    ):
        with pytest.raises(
            ValueError,
            match=r"reference must be label .* or clean_prediction .*got 'clean'; e.g. reference=label",
        ):
            build("clean")


@pytest.mark.parametrize(
    "name", ["clip", "clip_vit_b32", "clip_imagenet", "classifier", "digits_zoo", "cifar_resnet_zoo"]
)
def test_oracle_configs_set_reference_label(name):
    assert _load(name).reference == "label"


def test_the_driver_reads_the_oracles_reference():
    from genEval import evaluate
    from genEval.search.perturb import SearchConfig
    from tests.support.toys import LinearClassifier, SigmoidGenerator, toy_data

    judge = ClassifierOracle(LinearClassifier(seed=3), reference="clean_prediction")
    r = evaluate(LinearClassifier(seed=0), toy_data(12), SigmoidGenerator(), judge, SearchConfig(budget=1), seed=0)
    assert r.config.reference == "clean_prediction"
    assert all(s.reference == s.oracle_clean_pred for s in r.samples)  # the oracle's own clean verdict
    assert any(s.reference != s.label for s in r.samples)


# ---------------------------------------------------------------------- an oracle for other classes (issue 14)
def test_classifier_oracle_refuses_data_of_other_classes():
    from genEval.classifiers.loaders import cifar_resnet

    judge = ClassifierOracle(cifar_resnet(20))  # random weights; knows the CIFAR-10 class names
    judge.prepare(CIFAR10_CLASSES)
    digits = [str(i) for i in range(10)]
    with pytest.raises(
        ValueError,
        match=r"trained on the classes \[airplane, automobile, .*truck\] but the data's "
        r"classes are \[0, 1, .*9\].*Use oracle=digits_zoo",
    ):
        judge.prepare(digits)
    with pytest.raises(ValueError, match=r"but the data's classes are \[a, b, .*\].*or oracle=clip"):
        judge.prepare(list("abcdefghij"))
    zoo = ZooOracle([ClassifierOracle(cifar_resnet(20)), member([0])])
    with pytest.raises(ValueError, match=r"Use oracle=digits_zoo"):
        zoo.prepare(digits)
    member([0]).prepare(["x", "y", "z"])  # a judge that does not know its classes only checks the count


def test_cifar_data_presets_pick_the_cifar_zoo_and_an_explicit_oracle_wins():
    from hydra import compose, initialize_config_dir

    from genEval.commands import CONF_DIR

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        picks = {
            tuple(ov): compose("config", overrides=list(ov)).oracle
            for ov in [
                ("data=cifar10_jpg", "classifier=cifar_resnet20"),
                ("data=cifar10",),
                ("data=cifar10_jpg", "oracle=clip"),
                ("oracle=digits_zoo", "data=cifar10_jpg"),
                ("experiment=cifar10_taef2",),
                (),
            ]
        }
    depths = {k: [m.classifier.get("depth") for m in v.get("members", [])] for k, v in picks.items()}
    assert depths[("data=cifar10_jpg", "classifier=cifar_resnet20")] == [32, 56] == depths[("data=cifar10",)]
    assert depths[("experiment=cifar10_taef2",)] == [32, 56]
    assert picks[("data=cifar10_jpg", "oracle=clip")]._target_ == "oracles.clip.CLIPOracle"
    assert [m.classifier.arch for m in picks[("oracle=digits_zoo", "data=cifar10_jpg")].members] == ["mlp", "wide_cnn"]
    assert [m.classifier.arch for m in picks[()].members] == ["mlp", "wide_cnn"]  # the offline default is unchanged


def test_digits_zoo_on_cifar_stops_before_the_first_batch(tmp_path, digits_cache):
    from tests.support.assets import asset
    from tests.support.cli import geneval

    asset("cifar10/test-jpg")
    r = geneval(
        "data=cifar10_jpg",
        "classifier=cifar_resnet20",
        "oracle=digits_zoo",
        "data.limit=4",
        f"hydra.run.dir={tmp_path}",
        env_extra={"GENEVAL_CACHE": str(digits_cache)},
    )
    assert r.returncode == 2, r.stderr[-2000:]
    # refused by the cheap checks, from the configs, before any component is built (genEval/commands/checks.py)
    assert (
        "geneval: error: oracle digits_zoo (oracle.members.0.classifier) was trained on the 10 digit classes [0, 1,"
        in (r.stderr)
    )
    assert "but the data's classes are the 10 classes [airplane, automobile," in r.stderr
    assert "Use oracle=cifar_resnet_zoo" in r.stderr
    assert not (tmp_path / "samples.jsonl").exists() and not (tmp_path / "results.json").exists()


# -------------------------------------------------------------------------- CLIP prompts (issue 10, 14)
def test_clip_named_prompt_sets():
    from oracles.clip import named_templates

    openai = named_templates("openai")
    assert len(openai) == 80 and openai[0] == "a bad photo of a {}." and len(set(openai)) == 80
    assert named_templates("simple")[0] == "itap of a {}." and len(named_templates("simple")) == 7
    assert named_templates("paper") == ("an image of {}",)


def test_clip_prompts_are_logged_and_unreadable_names_warned(tiny_clip_name, caplog):
    o = make_clip(tiny_clip_name, templates="simple")
    assert len(o.templates) == 7 and o.prompts("cat")[0] == "itap of a cat."
    assert "... (7 templates)" in repr(o)
    caplog.set_level("INFO", logger="oracles.clip")
    o.prepare(CLASSES)
    assert "3 classes x 7 templates = 21 prompts" in caplog.text
    assert "prompts of 'cat': ['itap of a cat.', 'a bad photo of the cat.'" in caplog.text
    assert not [r for r in caplog.records if "look like" in r.getMessage()]
    o = make_clip(tiny_clip_name)
    caplog.clear()  # building a random-weight CLIP warns about its weights; only prepare's warnings count here
    o.prepare(["n01440764", "n01443537", "dog"])
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert (
        len(warned) == 1
        and "2 of 3 class names look like WordNet ids or bare numbers (n01440764, n01443537)" in warned[0]
        and "'an image of n01440764'" in warned[0]
        and "data=imagenet" in warned[0]
    )
    caplog.clear()
    make_clip(tiny_clip_name).prepare([str(i) for i in range(10)])
    assert "10 of 10 class names look like" in caplog.text


def test_clip_refuses_duplicate_class_names(tiny_clip_name):
    o = make_clip(tiny_clip_name)
    with pytest.raises(ValueError, match=r"the class names \['crane'\] occur more than once"):
        o.prepare(["crane", "dog", "crane"])
