"""The families: one file each, declaring its transformers layout (``family.Family``: parameter names, classes,
config translation, presets) and holding whatever modules are its own (MobileBERT's layer and embeddings).

    squeezebert.py  SqueezeBERT (grouped 1x1 convolutions)       bert.py        BERT, the miniatures, TinyBERT 4/312
    albert.py       ALBERT (shared layer, factorised embeddings)  distilbert.py  DistilBERT (no token types)
    electra.py      ELECTRA (discriminator, RTD head)             mobilebert.py  MobileBERT (bottlenecks, NoNorm)

The layers, embeddings, attention core and heads every family shares are ``model.py``'s; ``convert.py`` reads the
tables here.
"""

from __future__ import annotations

from squeezebert_jax.errors import InputError
from squeezebert_jax.models import albert, bert, distilbert, electra, mobilebert, squeezebert
from squeezebert_jax.models.family import Family

# in the order their state_dicts are told apart (MobileBERT's and ALBERT's keys also hold BERT's parts)
ALL: tuple[Family, ...] = (mobilebert.FAMILY, albert.FAMILY, distilbert.FAMILY, bert.FAMILY, squeezebert.FAMILY,
                           electra.FAMILY)
BY_STYLE: dict[str, Family] = {f.style: f for f in ALL}
PRESETS: dict[str, dict] = {name: fields for f in ALL for name, fields in f.presets.items()}
ALIASES = dict(bert.ALIASES)


def get(style: str | Family) -> Family:
    """The family record of ``style`` (a transformers model_type: "squeezebert", "bert", "albert", ...); a record is
    its own."""
    if isinstance(style, Family):
        return style
    if style not in BY_STYLE:
        raise InputError(f"unknown model family / transformers model_type {style!r}; one of {', '.join(BY_STYLE)}")
    return BY_STYLE[style]


def detect(keys, config=None) -> Family:
    """The family whose layout a state_dict's ``keys`` are in; where they are another family's too (ELECTRA's are
    BERT's: ``Family.keys_of``), ``config``'s family when it is that one."""
    keys = list(keys)
    for f in ALL:
        if f.detect and any(f.detect in k for k in keys):
            own = BY_STYLE[config.style] if config is not None else None
            return own if own is not None and own.keys_of == f.style else f
    raise InputError("state_dict has neither SqueezeBERT (encoder.layers.*), BERT (encoder.layer.*), ALBERT "
                     "(encoder.albert_layer_groups.*), DistilBERT (transformer.layer.*.q_lin) nor MobileBERT "
                     "(encoder.layer.*.bottleneck.*) keys")


def detect_style(keys) -> str:
    """The style of the layout a state_dict's ``keys`` are in (``detect``; ELECTRA's are BERT's)."""
    return detect(keys).style
