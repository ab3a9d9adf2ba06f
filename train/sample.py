"""Generate text from a trained model.

    python -m train.sample RUN_DIR [--prime "text"] [--length N] [--temperature T] [--seed S]
                           [--checkpoint best|latest]

The prime is read from a cold start, then characters are drawn one at a time from the softmax of the
logits divided by the temperature (0 takes the most likely character every time).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import minflux as mf

from .cli import command, prog
from .config import ConfigError
from .data import Vocabulary


def prime_tokens(vocab: Vocabulary, prime: str) -> np.ndarray:
    """The tokens of ``prime``; spaces become ``_`` for a vocabulary without spaces (Penn Treebank).
    An empty prime starts from an end of line (or a space, or token 0).

    >>> prime_tokens(Vocabulary(("\\n", "_", "a")), "a a").tolist()
    [2, 1, 2]
    """
    if not prime:
        for start in ("\n", " ", 10, 32):
            if start in vocab.symbols:
                return np.array([vocab.symbols.index(start)])
        return np.array([0])
    if vocab.kind == "chars" and " " not in vocab.symbols and "_" in vocab.symbols:
        prime = prime.replace(" ", "_")
    return vocab.encode(prime).astype(np.int64)


def check_prime(vocab: Vocabulary, prime: str) -> None:
    """Refuse a ``sample.prime`` with symbols outside ``vocab`` (a `ConfigError` naming the key).

    >>> check_prime(Vocabulary.from_text("ab "), "ba")
    >>> check_prime(Vocabulary.from_text("ab "), "abc")
    Traceback (most recent call last):
    ...
    minflux_train.config.ConfigError: sample.prime = 'abc': 'c' is not in the vocabulary ...
    """
    try:
        prime_tokens(vocab, prime)
    except ValueError as exc:
        raise ConfigError(f"sample.prime = {prime!r}: {exc}; use characters of the corpus, e.g. --set "
                          f"sample.prime=\"\" (an empty prime)") from None


def pick(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """A token drawn from ``softmax(logits / temperature)`` (the argmax when temperature <= 0).

    >>> pick(np.array([0.0, 5.0, 1.0]), 0.0, np.random.default_rng(0))
    1
    """
    logits = np.asarray(logits, dtype=np.float64)
    if temperature <= 0:
        return int(np.argmax(logits))
    z = logits / temperature
    p = np.exp(z - z.max())
    cumulative = np.cumsum(p)
    return int(min(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"), len(p) - 1))


def generate(model, vocab: Vocabulary, prime: str = "", length: int = 200, temperature: float = 1.0,
             rng: np.random.Generator | None = None, device: str = "cpu") -> str:
    """``length`` characters that ``model`` continues ``prime`` with (the prime is not included).

    >>> class AlwaysB:  # logits that favour "b" whatever the input
    ...     def initial_state(self, batch): return [np.zeros((batch, 1))]
    ...     def __call__(self, tokens, state): return np.tile([0.0, 9.0], tokens.shape + (1,)), state, None
    >>> generate(AlwaysB(), Vocabulary.from_text("ab"), prime="a", length=3, temperature=0)
    'bbb'
    """
    rng = np.random.default_rng() if rng is None else rng
    tokens = prime_tokens(vocab, prime)
    out = []
    with mf.no_grad():
        state = model.initial_state(1)
        logits, state, _ = model(mf.to_device(tokens[None, :], device), state)
        for _ in range(length):
            token = pick(mf.to_numpy(logits)[0, -1], temperature, rng)
            out.append(token)
            logits, state, _ = model(mf.to_device(np.array([[token]]), device), state)
    return vocab.decode(out)


@command
def main(argv: list[str] | None = None) -> int:
    """Command line: print generated text from a run; returns the exit status."""
    from .runs import RunError, add_run_arguments, open_run

    parser = argparse.ArgumentParser(prog=prog("train.sample"), description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", help="a run directory written by python -m train")
    parser.add_argument("--prime", default=None, help="text to start from (default: the config's)")
    parser.add_argument("--length", type=int, default=None, help="characters to generate")
    parser.add_argument("--temperature", type=float, default=None, help="0 = greedy; 1 = the model's "
                                                                         "distribution")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: fresh)")
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    if args.length is not None and args.length < 0:
        parser.error(f"--length must be >= 0, got {args.length}")
    if args.temperature is not None and args.temperature < 0:
        parser.error(f"--temperature must be >= 0 (0: always the most likely character), got "
                     f"{args.temperature}")
    run = open_run(args.run_dir, args.checkpoint, args.device)
    s = run.cfg.sample
    prime = s.prime if args.prime is None else args.prime
    try:
        prime_tokens(run.vocab, prime)
    except ValueError as exc:
        raise RunError(f"--prime: {exc}") from None
    text = generate(run.model, run.vocab, prime, s.length if args.length is None else args.length,
                    s.temperature if args.temperature is None else args.temperature,
                    np.random.default_rng(args.seed), run.device)
    print(prime + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
