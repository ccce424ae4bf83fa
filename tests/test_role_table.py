"""The one table of roles (``catalog.ROLE_TABLE``): every role declared once, and what reads it."""

import keras
import numpy as np
import pytest

import subsetsaver as ss
from subsetsaver import catalog
from subsetsaver.catalog import keras_source
from subsetsaver.formats.tf import bundle


def test_every_role_with_a_selector_is_known_to_the_parser_and_selects_its_role():
    roles = catalog.roles_from_names(["w", "w/Adam", "beta1_power", "bn/moving_mean", "w/ExponentialMovingAverage",
                                      "global_step"])
    selected = {role.name: role.selector for role in catalog.ROLE_TABLE if role.selector}
    assert selected == {"slot": "slots", "bn_stat": "bn_stats", "average": "averages", "global_step": "global_step"}
    for role, keyword in selected.items():
        selector = ss.parse(f"{keyword}()")
        assert (repr(selector), selector) == (f"{keyword}()", getattr(ss, keyword)())
        assert selector.evaluate(_Named(roles)) == roles.by_role[role]


def test_hyperparameters_are_the_optimizer_s_and_no_slot_yet_slots_selects_them(tmp_path):
    names = ["dense/w", "dense/w/Adam", "beta1_power", "Adam/learning_rate", "adam/learning_rate", "SGD/momentum",
             "adamw/weight_decay"]
    cat = catalog.file_catalog(bundle.write(str(tmp_path / "model"), {name: np.zeros(2, np.float32) for name in names}))
    hyperparameters = ["Adam/learning_rate", "SGD/momentum", "adam/learning_rate", "adamw/weight_decay"]
    assert sorted(cat.role("hyperparameter")) == hyperparameters
    assert {name: sorted(cat.record(name).roles) for name in names if name != "dense/w"} == {
        "dense/w/Adam": ["slot"], "beta1_power": ["optimizer", "slot"],
        **{name: ["hyperparameter", "optimizer"] for name in hyperparameters}}
    assert sorted(ss.slots().names(cat)) == sorted(hyperparameters + ["beta1_power", "dense/w/Adam"])


def test_a_keras_3_optimizer_s_learning_rate_is_a_hyperparameter_not_a_slot():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="dense")])
    optimizer = keras.optimizers.Adam(0.01)
    optimizer.build(model.trainable_variables)
    cat = keras_source.load(model, optimizer)
    own = optimizer.name + "/"  # adam, or adam_N after other optimizers in this process
    assert sorted(cat.role("hyperparameter")) == [own + "learning_rate"]
    assert cat.record(own + "learning_rate").roles == frozenset({"optimizer", "hyperparameter"})
    slots = ss.slots().names(cat)  # the learning rate, then the kernel's and the bias's momentum and velocity
    assert slots[0] == own + "learning_rate" and len(slots) == 5
    assert all(name.startswith(own) and name.endswith(("_momentum", "_velocity")) for name in slots[1:])


MESH_ADAFACTOR = {"encoder/q": (4, 6), "encoder/q_slot_vr": (4,), "encoder/q_slot_vc": (6,), "encoder/bias": (6,),
                  "encoder/bias_slot_v": (6,), "global_step": ()}


def test_mesh_tensorflow_adafactor_slots_are_slots_by_name(tmp_path):
    roles = catalog.roles_from_names(list(MESH_ADAFACTOR))
    assert sorted(roles.by_role["slot"]) == ["encoder/bias_slot_v", "encoder/q_slot_vc", "encoder/q_slot_vr"]
    assert roles.slot_of == {"encoder/bias_slot_v": "encoder/bias", "encoder/q_slot_vc": "encoder/q",
                             "encoder/q_slot_vr": "encoder/q"}


def test_slim_drops_mesh_tensorflow_adafactor_slots(tmp_path):
    prefix = bundle.write(str(tmp_path / "model"), {name: np.zeros(shape, np.int64 if not shape else np.float32)
                                                    for name, shape in MESH_ADAFACTOR.items()})
    report = ss.tools.slim.slim(prefix, "~slots()", str(tmp_path / "slim"))
    assert sorted(report.kept) == ["encoder/bias", "encoder/q", "global_step"]


class _Named:
    """The least a role selector asks of a catalog: its roles and the note on where they came from."""

    def __init__(self, roles):
        self.roles = roles

    def role(self, role):
        return self.roles.by_role.get(role, frozenset())

    def role_note(self, role):
        return ""


@pytest.mark.parametrize("role", catalog.ROLE_TABLE, ids=lambda role: role.name)
def test_each_role_says_what_it_is(role):
    assert role.meaning and role.meaning == role.meaning.strip() and len(role.meaning) < 80
    assert role.part_of in (None, *catalog.ROLES) and set(role.hides) <= set(catalog.ROLES)
