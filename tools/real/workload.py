"""The real-engine benchmark's workload: seeded multi-turn chats that share
system prompts, in token ids.

Every conversation starts with one of `systems` system prompts (drawn in
turn, so each is shared by conversations/systems of them), then takes
`turns` turns: a user message of fresh tokens, then the engine's answer
(the tokens it generated, which the next turn's prompt carries, as a chat
client sends its history back). Conversations start as a Poisson process
of `rate` per second; a turn follows the previous answer after a think
time. All token ids are drawn from [first_id, vocab) with a seeded
generator, so every policy sees the same prompts (the answers differ only
where the engines do; their weights are fixed, so the same prompt gives
the same answer).

The same description drives lrsim's replay of it (tools/real/compare.py
writes it as lrsim's conversation workload would, with the measured
answers' lengths).
"""

from __future__ import annotations

import random
from typing import Any, Dict, List


class Spec:
    def __init__(self, conversations: int = 24, turns: int = 4,
                 systems: int = 4, rate: float = 0.75,
                 system_tokens: "tuple[int, int]" = (300, 600),
                 user_tokens: "tuple[int, int]" = (60, 180),
                 output_tokens: "tuple[int, int]" = (8, 16),
                 think_s: "tuple[float, float]" = (2.0, 6.0),
                 vocab: int = 32000, first_id: int = 259,
                 seed: int = 1) -> None:
        self.conversations, self.turns, self.systems = (conversations, turns,
                                                        systems)
        self.rate = rate
        self.system_tokens, self.user_tokens = system_tokens, user_tokens
        self.output_tokens, self.think_s = output_tokens, think_s
        self.vocab, self.first_id, self.seed = vocab, first_id, seed

    def to_json(self) -> Dict[str, Any]:
        return dict(self.__dict__)

    def describe(self) -> str:
        def r(x: Any) -> str:
            return f"{x[0]}-{x[1]}"
        return (f"{self.conversations} conversations x {self.turns} turns, "
                f"{self.systems} system prompts of {r(self.system_tokens)} "
                f"tokens, user messages {r(self.user_tokens)}, answers "
                f"{r(self.output_tokens)}, {self.rate:g} conversations/s, "
                f"{r(self.think_s)} s between turns, seed {self.seed}")


def spec_from(d: Dict[str, Any]) -> Spec:
    """A Spec from its to_json()."""
    return Spec(**{k: (tuple(v) if isinstance(v, list) else v)
                   for k, v in d.items()})


class Turn:
    __slots__ = ("user", "n_out", "think_s")

    def __init__(self, user: List[int], n_out: int, think_s: float) -> None:
        self.user, self.n_out, self.think_s = user, n_out, think_s


class Conversation:
    def __init__(self, ident: int, system_id: int, system: List[int],
                 start_s: float, turns: List[Turn]) -> None:
        self.id, self.system_id, self.system = ident, system_id, system
        self.start_s, self.turns = start_s, turns


def generate(spec: Spec) -> List[Conversation]:
    rng = random.Random(spec.seed)

    def toks(lo_hi: "tuple[int, int]") -> List[int]:
        n = rng.randint(*lo_hi)
        return [rng.randrange(spec.first_id, spec.vocab) for _ in range(n)]

    systems = [toks(spec.system_tokens) for _ in range(spec.systems)]
    out = []
    t = 0.0
    for c in range(spec.conversations):
        if c > 0:
            t += rng.expovariate(spec.rate)
        turns = [Turn(toks(spec.user_tokens),
                      rng.randint(*spec.output_tokens),
                      rng.uniform(*spec.think_s))
                 for _ in range(spec.turns)]
        sid = c % spec.systems
        out.append(Conversation(c, sid, systems[sid], t, turns))
    return out
