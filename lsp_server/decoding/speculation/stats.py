"""What speculation learns across requests: α per draft source (and per kind of draft), the
forward costs T(n), and per request the decoding steps tallied by their draft source."""

from __future__ import annotations

from dataclasses import dataclass, field

from .acceptance import MAX_GAMMA, choose_gamma


@dataclass
class SourceStats:
    drafted: int = 0  # positions verified
    accepted: int = 0
    rejections: int = 0  # verification steps that ended on a disagreement
    seconds: float = 0.0  # time spent drafting: the work a draft adds (its positions' masks, a draft model's steps)
    proposing_seconds: float = 0.0  # the lookup's own time, paid at every step whether it drafts or not
    probe_hits: int = 0  # declined proposals whose first token the target took anyway (`Speculator.observe`)
    probe_misses: int = 0

    def probe(self, hit: bool) -> None:
        self.probe_hits += int(hit)
        self.probe_misses += int(not hit)

    def alpha(self, prior: float = 0.5, weight: float = 2.0) -> float:
        """Per-token acceptance rate (geometric MLE with a weak prior: a source's own α for
        its classes, such as the lookup's match lengths). A declined proposal's trial counts
        as a one-position draft: a hit as an accepted position, a miss as a rejection."""
        kept = self.accepted + self.probe_hits
        return (kept + prior * weight) / (kept + self.rejections + self.probe_misses + weight)


@dataclass
class StepTally:
    """Decoding steps of one kind (a draft source and its kind, or `plain`: no draft): how many,
    the tokens they committed, the γ chosen and the time they took (drafting, the forward pass,
    the choices), so each source's yield can be set against plain steps of the same run."""

    steps: int = 0
    tokens: int = 0
    gamma: int = 0  # summed over the steps
    ms: float = 0.0

    def to_json(self) -> dict:
        return {"steps": self.steps, "tokens": self.tokens, "gamma": self.gamma, "ms": round(self.ms, 2)}


@dataclass
class SpeculationStats:
    """Running estimates of α (per source) and of the forward costs T(n), across requests."""

    sources: dict[str, SourceStats] = field(default_factory=dict)
    forward_ms: dict[int, float] = field(default_factory=dict)  # tokens fed -> EMA of ms
    steps: int = 0
    gamma_sum: int = 0  # over the steps that drafted: the mean γ used
    gamma_steps: int = 0

    def source(self, name: str) -> SourceStats:
        return self.sources.setdefault(name, SourceStats())

    def record_forward(self, n: int, ms: float) -> None:
        n = min(n, MAX_GAMMA + 2)
        old = self.forward_ms.get(n)
        self.forward_ms[n] = ms if old is None else 0.8 * old + 0.2 * ms

    def t(self, n: int) -> float | None:
        n = min(n, MAX_GAMMA + 2)
        if n in self.forward_ms:
            return self.forward_ms[n]
        known = sorted(self.forward_ms)
        if not known:
            return None
        lo = max((k for k in known if k <= n), default=known[0])
        return self.forward_ms[lo]

    def verify_ratio(self, gamma: int) -> float:
        t1, tg = self.t(1), self.t(gamma + 1)
        if not t1 or not tg:
            return 1.0 + 0.05 * gamma  # until measured: a little dearer per extra token
        return max(tg / t1, 1.0)

    def cost_ratio(self, name: str) -> float:
        s = self.sources.get(name)
        t1 = self.t(1)
        if s is None or not s.drafted or not t1:
            return 0.0
        return (s.seconds * 1000 / s.drafted) / t1

    def alpha(self, name: str, kind: str | None = None) -> float:
        """α of a source, or of one kind of its drafts (`lookup` by match length) with the
        source's α as the prior until that kind has a record of its own."""
        a = self.source(name).alpha()
        if kind is None:
            return a
        return self.source(f"{name}/{kind}").alpha(prior=a)

    def choose(self, name: str, kind: str | None = None) -> int:
        return choose_gamma(self.alpha(name, kind), self.cost_ratio(name), MAX_GAMMA, self.verify_ratio)

    def to_json(self) -> dict:
        return {
            "sources": {
                n: {"alpha": round(self.alpha(*n.split("/", 1)), 3), "c": round(self.cost_ratio(n.split("/")[0]), 4),
                    "drafted": s.drafted, "accepted": s.accepted, "probed": s.probe_hits + s.probe_misses,
                    "probe_hits": s.probe_hits}
                for n, s in sorted(self.sources.items())
            },
            "forward_ms": {str(k): round(v, 2) for k, v in sorted(self.forward_ms.items())},
            "gamma_mean": round(self.gamma_sum / self.gamma_steps, 2) if self.gamma_steps else 0,
        }
