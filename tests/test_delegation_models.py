"""Decision models (issue 17): logistic, gbm and lm learn which choice a point asks for.

The points are built as :func:`tackroom.harness.delegation.decision_points` records them
(labels, element dicts, context), from instructions that determine the correct choice —
the word in quotes, the field a quoted value belongs to, whether everything is typed yet —
so a learnable signal exists; held-out points use words never seen in training.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from tackroom.core.errors import ConfigError
from tackroom.delegation.training import train_model
from tackroom.policies.delegation.features import (
    FEATURE_NAMES,
    choice_text,
    context_text,
    features,
    point_features,
)
from tackroom.policies.delegation.models import (
    DecisionModel,
    Example,
    kinds,
    load_model,
    model_hash,
)

TRAIN_WORDS = ("ok cancel submit next back yes no save delete open close apply reset edit "
               "copy paste share print help login start stop play pause send reply").split()
TEST_WORDS = ("accept decline forward rewind archive upload download refresh search browse "
              "confirm retry skip finish begin").split()
FIELDS = ("username", "password", "email", "city", "name", "phone")
VALUES = ("alice", "bob42", "hunter2", "paris", "x9y8", "carol", "dave", "zed", "q1w2",
          "lima", "oslo", "mira")


def _el(ref: int, tag: str, text: str, rng: random.Random, value=None) -> dict:
    return {"ref": ref, "tag": tag, "text": text, "value": value, "id": "", "classes": "",
            "left": float(rng.randint(0, 150)), "top": float(rng.randint(0, 150)),
            "width": float(rng.randint(20, 80)), "height": 20.0, "focused": False}


def _ctx(instruction: str, previous: list[str], n: int, turn: int = 0) -> dict:
    return {"instruction": instruction, "turn": turn, "turns_left": 6 - turn,
            "previous": previous, "last_error": False, "n_elements": n + 2}


def click_point(rng: random.Random, words: tuple[str, ...]) -> tuple[dict, int]:
    """'Click the "X" button' over 4–8 clickable elements; the one whose text is X."""
    texts = rng.sample(words, rng.randint(4, 8))
    target = rng.randrange(len(texts))
    template = rng.choice(['Click the button "{}".', 'Press "{}".', 'Select the "{}" link.',
                           'Click on "{}" to continue.'])
    choices = []
    for i, t in enumerate(texts):
        tag = rng.choice(["button", "button", "a", "span"])
        choices.append({"label": f"click [{i + 2}] {tag} {t!r}",
                        "action": {"kind": "click", "ref": i + 2},
                        "el": _el(i + 2, tag, t, rng), "text": None})
    return {"type": "click", "context": _ctx(template.format(texts[target]), [], len(texts)),
            "choices": choices}, target


def type_point(rng: random.Random) -> tuple[dict, int]:
    """Two quoted values for two fields, some already typed; the next value into its field."""
    f1, f2 = rng.sample(FIELDS, 2)
    v1, v2 = rng.sample(VALUES, 2)
    instruction = rng.choice(['Enter "{}" as the {} and "{}" as the {}, then submit.',
                              'Type "{}" into the {} field and "{}" into the {} field.'])
    instruction = instruction.format(v1, f1, v2, f2)
    fields = [(3, f1), (5, f2)]
    rng.shuffle(fields)
    done_first = rng.random() < 0.5
    previous = [f"type {v1!r} into [{dict((f, r) for r, f in fields)[f1]}]"] if done_first \
        else []
    choices = []
    for ref, field in fields:
        for v in (v1, v2):
            value = v1 if done_first and field == f1 else ""
            if value == v:
                continue  # the harness leaves out a text the field already holds
            choices.append({"label": f"type {v!r} into [{ref}] input_text {field.title()!r}",
                            "action": {"kind": "type", "ref": ref, "text": v},
                            "el": _el(ref, "input_text", field.title(), rng, value=value),
                            "text": v})
    want = (v2, f2) if done_first else (v1, f1)
    label = next(i for i, c in enumerate(choices)
                 if c["text"] == want[0] and c["el"]["text"] == want[1].title())
    return {"type": "type", "context": _ctx(instruction, previous, 4, len(previous)),
            "choices": choices}, label


def submit_point(rng: random.Random) -> tuple[dict, int]:
    """Submit once every quoted value is typed, continue before."""
    vals = rng.sample(VALUES, rng.randint(1, 3))
    k = rng.randint(0, len(vals))
    instruction = "Enter " + " and ".join(f'"{v}"' for v in vals) + " and press Submit."
    previous = [f"type {v!r} into [{3 + i}]" for i, v in enumerate(vals[:k])]
    choices = [{"label": "continue", "action": None, "el": None, "text": None},
               {"label": "submit: click [9] button 'Submit'",
                "action": {"kind": "click", "ref": 9},
                "el": _el(9, "button", "Submit", rng), "text": None}]
    return {"type": "submit", "context": _ctx(instruction, previous, 5, k),
            "choices": choices}, int(k == len(vals))


def dataset(seed: int, n: int, words: tuple[str, ...] = TRAIN_WORDS) -> list[Example]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        make = (lambda r: click_point(r, words), type_point, submit_point)[i % 3]
        point, label = make(rng)
        out.append(Example(point, label))
    return out


def accuracy(model: DecisionModel, examples: list[Example]) -> float:
    hits = 0
    for ex in examples:
        p = model.predict(ex.point)
        hits += max(range(len(p)), key=p.__getitem__) == ex.label
    return hits / len(examples)


def assert_distribution(p: list[float], n: int) -> None:
    assert len(p) == n
    assert all(math.isfinite(x) and 0.0 <= x <= 1.0 for x in p)
    assert abs(sum(p) - 1.0) < 1e-6


TRAIN = dataset(0, 240)
HELD_OUT = dataset(1, 120, TEST_WORDS)  # click points over words never seen in training


# -- features -----------------------------------------------------------------------------
def test_features_have_a_signal_and_are_total():
    point, label = click_point(random.Random(3), TRAIN_WORDS)
    rows = point_features(point)
    assert len(rows) == len(point["choices"]) and all(len(r) == len(FEATURE_NAMES) for r in rows)
    col = FEATURE_NAMES.index("text_equals_quoted")
    assert [i for i, r in enumerate(rows) if r[col] == 1.0] == [label]
    assert features(point, point["choices"][label]) == rows[label]
    # the continue choice: no element/text features, is_continue set
    sub, _ = submit_point(random.Random(4))
    cont = point_features(sub)[0]
    assert cont[FEATURE_NAMES.index("is_continue")] == 1.0
    assert cont[FEATURE_NAMES.index("text_in_instruction")] == 0.0
    # a type choice already done shows as done; odd inputs give zeros, not exceptions
    odd = {"type": "weird", "context": {"previous": [None, 3], "turn": "x"},
           "choices": [{"label": None, "action": {"kind": 5}, "el": {"top": float("nan")}},
                       {}]}
    assert all(math.isfinite(x) for r in point_features(odd) for x in r)
    assert point_features({}) == []
    text = choice_text(point, point["choices"][0])
    assert text.startswith(context_text(point)) and point["choices"][0]["label"] in text
    assert "goal: " in text


def test_type_features_tell_which_field():
    point, label = type_point(random.Random(7))
    rows = point_features(point)
    near = FEATURE_NAMES.index("el_near_quoted")
    assert rows[label][near] == max(r[near] for r in rows) > 0


# -- logistic and gbm ---------------------------------------------------------------------
class _Trained(dict):
    """The logistic and gbm models trained on TRAIN, built on first use (gbm needs sklearn)."""

    def __missing__(self, kind: str) -> DecisionModel:
        need(kind)
        self[kind] = train_model(kind, TRAIN, seed=0)
        return self[kind]


def need(kind: str) -> None:
    if kind == "gbm":
        pytest.importorskip("sklearn")


@pytest.fixture(scope="module")
def trained() -> dict[str, DecisionModel]:
    return _Trained()


@pytest.mark.parametrize("kind", ["logistic", "gbm"])
def test_learns_and_generalises(trained, kind):
    model = trained[kind]
    assert model.kind == kind and isinstance(model, DecisionModel)
    assert accuracy(model, HELD_OUT) >= 0.8, kind
    for ex in HELD_OUT[:30]:
        assert_distribution(model.predict(ex.point), len(ex.point["choices"]))
    one = {"type": "command", "context": {}, "choices": [{"label": "continue", "action": None}]}
    assert model.predict(one) == [1.0]
    # a point type it never saw, with commands for choices
    cmds = {"type": "command", "context": {"instruction": "Run the tests", "previous": ["run 'ls'"]},
            "choices": [{"label": "continue", "action": None, "el": None, "text": None}]
            + [{"label": f"run {c!r}", "action": {"kind": "shell", "cmd": c}, "el": None,
                "text": c} for c in ("ls", "make test", "cat README.md")]}
    assert_distribution(model.predict(cmds), 4)


@pytest.mark.parametrize("kind", ["logistic", "gbm"])
def test_save_load_hash(trained, kind, tmp_path):
    model = trained[kind]
    a, b = tmp_path / "a", tmp_path / "b"
    model.save(a)
    meta = json.loads((a / "decision.json").read_text())
    assert meta["kind"] == kind and meta["format"] == 1
    loaded = load_model(a)
    assert loaded.kind == kind
    for ex in HELD_OUT[:20]:
        assert loaded.predict(ex.point) == model.predict(ex.point)
    h = model_hash(a)
    assert len(h) == 12 and int(h, 16) >= 0
    train_model(kind, TRAIN, seed=0).save(b)  # the same data and seed: the same bytes
    assert model_hash(b) == h
    assert load_model(a, expected_hash=h).kind == kind
    other = tmp_path / "other"
    train_model(kind, TRAIN[:150], seed=0).save(other)
    assert model_hash(other) != h
    with pytest.raises(ConfigError, match="pinned"):
        load_model(other, expected_hash=h)


def _contradicting(examples: list[Example]) -> list[Example]:
    """The same click points labelled 'the first choice', whatever the instruction says."""
    return [Example(ex.point, 0) for ex in examples if ex.point["type"] == "click"
            and ex.label != 0]


@pytest.mark.parametrize("kind", ["logistic", "gbm"])
def test_weights_matter(kind):
    need(kind)
    clicks = [ex for ex in TRAIN if ex.point["type"] == "click"]
    bad = _contradicting(clicks)
    probe = [ex for ex in HELD_OUT if ex.point["type"] == "click" and ex.label != 0][:10]
    good_only = train_model(kind, [Example(e.point, e.label, 1.0) for e in clicks]
                            + [Example(e.point, e.label, 0.0) for e in bad])
    bad_only = train_model(kind, [Example(e.point, e.label, 0.0) for e in clicks]
                           + [Example(e.point, e.label, 1.0) for e in bad])
    assert accuracy(good_only, probe) >= 0.8
    first = sum(max(range(len(p)), key=p.__getitem__) == 0
                for p in (bad_only.predict(ex.point) for ex in probe))
    assert first >= 8  # it follows the contradicting subset: the first choice
    if kind == "logistic":  # weight 0 is exactly "left out"
        alone = train_model(kind, clicks)
        assert alone.predict(probe[0].point) == good_only.predict(probe[0].point)


def test_training_errors():
    with pytest.raises(ConfigError, match="unknown decision model 'forest'"):
        train_model("forest", TRAIN)
    with pytest.raises(ConfigError, match="positive weight"):
        train_model("logistic", [Example(TRAIN[0].point, 0, 0.0)])
    with pytest.raises(ConfigError, match="label"):
        train_model("logistic", [Example(TRAIN[0].point, 99)])
    with pytest.raises(ConfigError, match="weight"):
        train_model("logistic", [Example(TRAIN[0].point, 0, -1.0)])
    with pytest.raises(ConfigError, match="unknown option"):
        train_model("gbm", TRAIN[:10], depth=3)
    assert {"logistic", "gbm", "lm"} <= set(kinds())  # the registry's decision_model kind


@pytest.mark.parametrize("kind", ["logistic", "gbm"])
def test_missing_or_corrupt_dir(trained, kind, tmp_path):
    with pytest.raises(ConfigError, match="no decision model directory"):
        load_model(tmp_path / "nope")
    with pytest.raises(ConfigError):
        model_hash(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="decision.json"):
        load_model(tmp_path / "empty")
    d = tmp_path / kind
    trained[kind].save(d)
    meta_file = d / "decision.json"
    good = meta_file.read_text()
    meta_file.write_text(good[: len(good) // 2])
    with pytest.raises(ConfigError, match="unreadable"):
        load_model(d)
    meta = json.loads(good)
    for bad in ({**meta, "kind": "forest"}, {**meta, "format": 9},
                {**meta, "features": ["x"]}):
        meta_file.write_text(json.dumps(bad))
        with pytest.raises(ConfigError):
            load_model(d)
    meta_file.write_text(good)
    if kind == "logistic":
        meta_file.write_text(json.dumps({**meta, "weights": [1.0, 2.0]}))
        with pytest.raises(ConfigError, match="corrupt"):
            load_model(d)
    else:
        blob = (d / "model.pkl").read_bytes()
        (d / "model.pkl").write_bytes(blob[:-10] + b"0123456789")
        with pytest.raises(ConfigError, match="sha256"):
            load_model(d)
        (d / "model.pkl").unlink()
        with pytest.raises(ConfigError, match="corrupt"):
            load_model(d)


# -- lm -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lm_base(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tackroom.models import init_model

    return init_model(tmp_path_factory.mktemp("lm-base"), size="tiny", seed=0)


def test_lm_learns_saves_and_loads(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    train = TRAIN[:120]
    probe = HELD_OUT[:45]
    # no base: a tiny `model init` model in a temporary directory, then fine-tuned
    # one torch thread: a 1M-parameter model trains no slower on one, and a second spends
    # CPU waiting (the default is 2)
    model = train_model("lm", train, seed=0, epochs=3, lr=1e-3, threads=1)
    assert model.kind == "lm"
    chance = sum(1 / len(ex.point["choices"]) for ex in probe) / len(probe)
    # a 1M-parameter model from scratch in seconds: well above chance, on words
    # (in the click points) it never saw
    assert accuracy(model, probe) >= chance + 0.12
    model.save(tmp_path / "lm")
    files = {p.name for p in (tmp_path / "lm").iterdir()}
    assert {"decision.json", "config.json", "model.safetensors", "tokenizer.json"} <= files
    loaded = load_model(tmp_path / "lm")
    for ex in probe[:6]:
        p = loaded.predict(ex.point)
        assert_distribution(p, len(ex.point["choices"]))
        assert p == pytest.approx(model.predict(ex.point), abs=1e-6)
    one = {"type": "click", "context": {}, "choices": [{"label": 'click [1] a "new"',
                                                         "action": {"kind": "click", "ref": 1}}]}
    assert loaded.predict(one) == [1.0]
    (tmp_path / "lm" / "model.safetensors").write_bytes(b"not weights")
    with pytest.raises(ConfigError, match="corrupt"):
        load_model(tmp_path / "lm")


def test_lm_weights_and_hash(lm_base, tmp_path):
    submits = [ex for ex in dataset(2, 60) if ex.point["type"] == "submit"]
    # the contradicting subset: the same points with the other choice (submit <-> continue)
    bad = [Example(ex.point, 1 - ex.label) for ex in submits]
    probe = [ex for ex in dataset(3, 90) if ex.point["type"] == "submit"]
    opts = {"base": str(lm_base), "epochs": 4, "lr": 2e-3, "threads": 1}
    good_only = train_model("lm", [Example(e.point, e.label, 1.0) for e in submits]
                            + [Example(e.point, e.label, 0.0) for e in bad], **opts)
    bad_only = train_model("lm", [Example(e.point, e.label, 0.0) for e in submits]
                           + [Example(e.point, e.label, 1.0) for e in bad], **opts)

    def p_right(model: DecisionModel) -> float:
        return sum(model.predict(ex.point)[ex.label] for ex in probe) / len(probe)

    assert p_right(bad_only) < 0.5 < p_right(good_only)
    good_only.save(tmp_path / "a")
    train_model("lm", [Example(e.point, e.label, 1.0) for e in submits]
                + [Example(e.point, e.label, 0.0) for e in bad], **opts).save(tmp_path / "b")
    bad_only.save(tmp_path / "c")
    h = model_hash(tmp_path / "a")
    assert model_hash(tmp_path / "b") == h != model_hash(tmp_path / "c")
    with pytest.raises(ConfigError, match="no config.json"):
        train_model("lm", submits, base=str(tmp_path))
