"""γ's public Python API: gamma, score_gamma, trust and the Truster."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from veracity.backends.base import Backend
from veracity.cache import Cache
from veracity.client import CachedEmbedder, LLMClient
from veracity.embed.base import Embedder
from veracity.errors import ConfigError
from veracity.methods.gamma.calibration.core import Calibration, Curve, as_calibration
from veracity.methods.gamma.calibration.trust import TrustScore, TrustSettings, score_trust
from veracity.methods.gamma.control import CONTROLS, add_null_control
from veracity.methods.gamma.core import Form, GammaSettings, check_prompt, measure_gamma, score_answers
from veracity.methods.gamma.records import GammaRecord
from veracity.registry import load_embedder, load_model
from veracity.runs.common import open_cache
from veracity.types import Item, Sampling


def _embedder(embedder: str | Embedder, cache: Cache | None) -> CachedEmbedder:
    return CachedEmbedder(load_embedder(embedder) if isinstance(embedder, str) else embedder, cache)


def gamma(
    prompts: str | Sequence[str],
    model: str | Backend = "llamacpp/default",
    embedder: str | Embedder = "st/default",
    n: int = 10,
    seed: int = 0,
    form: Form = "sin",
    ball: str = "ascii-control",
    max_tokens: int = 64,
    cache: bool | str | Path | Cache = True,
    control: str | None = None,
) -> list[GammaRecord]:
    """Harmonic gamma of each prompt's answer; one typed record per prompt (``to_json()``
    gives the shape ``veracity gamma --json`` prints).

    ``control="numeric"`` also answers each prompt n more times along other compute paths
    (no input change) and adds ``gamma_null`` and ``gamma_above_null`` to every record.

    >>> veracity.gamma("What is 2+2?", model="fake/constant", embedder="hash/default",
    ...                cache=False)[0].gamma
    0.0
    """
    texts = [prompts] if isinstance(prompts, str) else list(prompts)
    for index, prompt in enumerate(texts, 1):
        check_prompt(prompt, f"prompt {index}")
    if control is not None and control not in CONTROLS:
        raise ConfigError(f"unknown control '{control}'; known: {', '.join(CONTROLS)}")
    store = open_cache(cache)
    backend = load_model(model) if isinstance(model, str) else model
    client = LLMClient(backend, store)
    settings = GammaSettings(
        n=n, ball=ball, seed=seed, form=form, sampling=Sampling(temperature=0.0, max_tokens=max_tokens)
    )
    try:
        items = [Item(f"prompt-{i}", p) for i, p in enumerate(texts, 1)]
        cached_embedder = _embedder(embedder, store)
        records = measure_gamma(items, client, cached_embedder, settings)
        if control is not None:
            records, _ = add_null_control(records, client, cached_embedder, settings.sampling, n,
                                          form)
        return records
    finally:
        if isinstance(model, str):
            client.close()


def score_gamma(
    answer: str,
    perturbed_answers: Sequence[str],
    embedder: str | Embedder = "st/default",
    form: Form = "sin",
) -> float | None:
    """Gamma of recorded outputs, no model needed; None if the answer is empty."""
    return score_answers([answer], [perturbed_answers], _embedder(embedder, None), form)[0]


class Truster:
    """A loaded model and embedder that score answers in real time (see :func:`trust`).

    Load once, score many: ``with Truster() as t: t("What is 2+2?", answer="4").verdict``.
    """

    def __init__(
        self,
        model: str | Backend = "llamacpp/default",
        embedder: str | Embedder = "st/default",
        n: int = 1,
        form: Form = "sin",
        thresholds: tuple[float, float] | None = None,
        ball: str = "ascii-control",
        seed: int = 0,
        max_tokens: int = 64,
        cache: bool | str | Path | Cache = True,
        paraphraser: str | Backend | None = None,
        calibration: str | Path | Calibration | None = None,
        force: bool = False,
    ) -> None:
        """``calibration`` (a file from ``veracity calibrate``) adds P(correct) to every score
        and sets the verdict thresholds; one made for another model, embedder, form, ball or
        N is refused unless ``force`` (recorded in each score's ``calibration``)."""
        self.curve: Curve | None = None
        self.calibration: dict[str, Any] | None = None
        if calibration is not None and thresholds is not None:
            raise ConfigError("give thresholds or a calibration, not both: a calibration "
                              "sets the verdict thresholds")
        found = None if calibration is None else as_calibration(calibration)
        self.settings = TrustSettings(
            n=n, ball=ball, seed=seed, form=form, thresholds=thresholds,
            sampling=Sampling(temperature=0.0, max_tokens=max_tokens),
        )
        store = open_cache(cache)
        self._owned: list[LLMClient] = []
        self.client = self._client(model, store)
        self.paraphraser = None if paraphraser is None else self._client(paraphraser, store)
        self.embedder = _embedder(embedder, store)
        if found is not None:
            key = {"model": self.client.spec, "embedder": self.embedder.spec, "form": form,
                   "ball": ball, "n": n}
            try:
                self.curve, self.calibration = found.select(key, force)
            except ConfigError:
                self.close()
                raise

    def _client(self, model: str | Backend, store: Cache | None) -> LLMClient:
        client = LLMClient(load_model(model) if isinstance(model, str) else model, store)
        if isinstance(model, str):
            self._owned.append(client)
        return client

    def __call__(self, prompt: str, answer: str | None = None) -> TrustScore:
        """Score ``answer`` to ``prompt`` (the model's own answer when None)."""
        return score_trust(prompt, self.client, self.embedder, answer, self.settings,
                           self.paraphraser, curve=self.curve, calibration=self.calibration)

    def close(self) -> None:
        """Release the models this Truster loaded itself."""
        for client in self._owned:
            client.close()
        self._owned.clear()

    def __enter__(self) -> Truster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def trust(
    prompt: str,
    answer: str | None = None,
    model: str | Backend = "llamacpp/default",
    embedder: str | Embedder = "st/default",
    n: int = 1,
    form: Form = "sin",
    thresholds: tuple[float, float] | None = None,
    ball: str = "ascii-control",
    seed: int = 0,
    max_tokens: int = 64,
    cache: bool | str | Path | Cache = True,
    calibration: str | Path | Calibration | None = None,
    force: bool = False,
) -> TrustScore:
    """Real-time trust score of one answer: gamma from N perturbed calls, and a verdict.

    ``answer`` is the answer the caller already has (scored as is, not regenerated); without
    it the model answers first. ``thresholds`` = (low, high): gamma < low is "trustworthy",
    < high "uncertain", otherwise "untrustworthy" ("unscored" for an empty answer). The
    default is the authors' 0.1 / 0.2 buckets, which they apply to their code's form
    sqrt(1 - cos); for the default ``sin`` form they become 0.141 / 0.280.

    ``calibration`` (a file from ``veracity calibrate``, made for the same model, embedder,
    form, ball and n, or any with ``force=True``) adds ``p_correct`` and sets the thresholds.

    This loads the model and embedder on every call; for many calls keep a :class:`Truster`.

    >>> veracity.trust("What is 2+2?", answer="4", model="fake/constant",
    ...                embedder="hash/default", cache=False).verdict
    'trustworthy'
    """
    with Truster(model, embedder, n, form, thresholds, ball, seed, max_tokens, cache,
                 calibration=calibration, force=force) as truster:
        return truster(prompt, answer)
