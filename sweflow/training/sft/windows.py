"""Conversations longer than a training sequence, made to fit without losing what they teach.

An agent trajectory is long (file views and test output), and its first turns are the ones that
teach where to look (run the reproduction, read the traceback, open the file) while its last
turns edit, check and submit. Cutting its end drops the fix; cutting its start drops the
localisation. So a long conversation is split into windows: each keeps the conversation's start
(the system and task messages), then the observation its first trained turn answers and as much
of what preceded it as fits (all of it when it can) as untrained context, then trains as many
consecutive assistant turns as still fit. Every assistant turn that is trained at all (a turn of
``weight`` 0 is context only: a correction's student turns) and fits is trained exactly once,
with as much of what preceded it as fits. Context comes before packing: a window that trained
the edit or the submit straight after the task, its history dropped to make room, would teach a
student to answer an issue with "submit"; a turn that does not fit beside the observation it
answers is dropped rather than trained without it.

``last_turns`` is the other choice (``overlength: truncate``): one sequence, the start and the
latest turns that fit.
"""

from __future__ import annotations

from sweflow.training.chat import ChatEncoder, DriftError, Encoded, Messages

IGNORE = -100  # the label of a token that is not trained (torchtune's CROSS_ENTROPY_IGNORE_IDX)


def split_windows(
    messages: Messages, tools: Messages | None, encoder: ChatEncoder, max_seq_len: int
) -> tuple[list[tuple[list[int], list[int]]], int]:
    """(tokens, labels) of each window, and how many trained assistant turns did not fit."""
    start = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    turns = [i for i in range(start, len(messages)) if messages[i]["role"] == "assistant"]
    taught = [k for k, i in enumerate(turns) if messages[i].get("weight", 1)]
    head = messages[:start]

    def encoded(first: int, last: int) -> Encoded | None:
        """Head + the observation turn ``first`` answers + the turns first..last, if it fits."""
        body = messages[turns[first - 1] + 1 if first else start : turns[last] + 1]
        try:
            result = encoder.encode([*head, *body], tools)
        except DriftError:
            return None
        return result if len(result.tokens) <= max_seq_len else None

    windows, dropped, i = [], 0, 0
    while i < len(taught):
        a = taught[i]
        # context first: the earliest turn c from which turn a fits (0: its whole history)
        fits = ((c, found) for c in range(a + 1) if (found := encoded(c, a)) is not None)
        c, best = next(fits, (None, None))
        if best is None:  # this turn does not fit even beside the observation it answers
            dropped, i = dropped + 1, i + 1
            continue
        j = i  # then pack the next trained turns while they fit
        while j + 1 < len(taught) and (wider := encoded(c, taught[j + 1])) is not None:
            best, j = wider, j + 1
        windows.append(_labelled(best, trained_from=a - c))
        i = j + 1
    return windows, dropped


def _labelled(encoded: Encoded, trained_from: int) -> tuple[list[int], list[int]]:
    """Tokens and labels of a window whose first ``trained_from`` assistant turns are context."""
    boundary = encoded.prompt_lengths[trained_from]
    labels = [
        token if keep and at >= boundary else IGNORE
        for at, (token, keep) in enumerate(zip(encoded.tokens, encoded.trained, strict=True))
    ]
    return encoded.tokens, labels


def last_turns(
    messages: Messages, tools: Messages | None, encoder: ChatEncoder, max_seq_len: int
) -> Encoded | None:
    """The start (the system and task messages) and the latest turns that fit in one
    sequence; None when even the start and the last assistant turn do not fit."""
    start = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    turns = [i for i in range(start, len(messages)) if messages[i]["role"] == "assistant"]
    for first in turns[1:]:
        try:
            encoded = encoder.encode([*messages[:start], *messages[first:]], tools)
        except DriftError:
            continue
        if len(encoded.tokens) <= max_seq_len:
            return encoded
    return None
