"""The context block: what the rest of the repository says about the code at the cursor, as the
prompt puts it in front of the window (decoding/prompt.py, `build_prompt(context=...)`).

A block is a tuple of sections, each one file's part of it: the stubs of the definitions the code
at the cursor uses (`stubs.py`), a chunk of another document like that code (`neighbours.py`),
or the chunk around the place another document was edited last.
A plain model gets the sections as Python comments (what Copilot does with neighbouring tabs,
"# Compare this snippet from util.py:"); a fill-in-the-middle model with repository markers
(Qwen2.5-Coder) gets each as a `<|file_sep|>` file of its own. The prompt takes the sections in
order while they fit `share` of its budget (whole or not at all), so a block gives the same
tokens every time: its start, and with it the KV cache of the prompt, stays put while the block
does (`contexts.RepoContexts` keeps one block per document while the user types in one function).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_SHARE = 0.25  # of `contextTokens`: a 1,024-token prompt keeps 768 for the window
MAX_SHARE = 0.75
FORMS = ("comments", "code")


def block_share(setting: float | None, fim) -> float:
    """The block's share of `contextTokens`: the `contextShare` setting, or where it is unset
    (None), DEFAULT_SHARE for a model that reads other files as files of its repository (its
    prompt has a file separator: Qwen2.5-Coder's `<|file_sep|>`; `fim`: the model's
    `FimTokens`, None for a plain model) and 0 for others, which read the block as comments: a
    model trained on repositories with those markers reads the block as it read other files in
    training (on Qwen2.5-Coder 0.5B exact match at `member` cut points rises 0.35 → 0.50), and a
    plain one moves its answers without copying from it (no exact match gained on SmolLM2-135M;
    docs/context.md)."""
    if setting is not None:
        return setting
    return DEFAULT_SHARE if fim is not None and fim.file_sep is not None else 0.0


@dataclass(frozen=True)
class ContextSection:
    name: str  # the file it comes from, as the prompt names it ("pkg/util.py")
    text: str  # stubs or a chunk of code, "\n" line ends
    kind: str  # "definitions" | "neighbour" (like the code at the cursor) | "edited" (around another document's last edit)

    def as_comment(self) -> str:
        """The section as Python comments (plain models): a heading, then every line after `# `."""
        heading = {"definitions": "Definitions used here, from ", "edited": "Edited last, in "}.get(
            self.kind, "Compare this snippet from ")
        lines = self.text.rstrip("\n").split("\n")
        return f"# {heading}{self.name}:\n" + "".join(f"# {line}".rstrip() + "\n" for line in lines)

    def as_code(self) -> str:
        """The section as code after a comment naming its file (plain models, the `code` form:
        what a model trained on concatenated files has seen; the comments form is the default,
        see docs/context.md for the two measured)."""
        heading = {"definitions": "Definitions used here, from ", "edited": "Edited last, in "}.get(
            self.kind, "Compare this snippet from ")
        return f"# {heading}{self.name}:\n{self.text.rstrip(chr(10))}\n"

    def as_file(self) -> str:
        """The section as a repository-level file (after `<|file_sep|>`): its name, then its text."""
        return f"{self.name}\n{self.text.rstrip(chr(10))}\n"


@dataclass(frozen=True)
class ContextBlock:
    sections: tuple[ContextSection, ...] = ()
    share: float = DEFAULT_SHARE  # of the prompt's budget the block may take (0: none)
    form: str = "comments"  # how a plain model reads it: "comments" (every line after `# `) or "code"

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise ValueError(f"a context block's form must be one of {', '.join(FORMS)}, not {self.form!r}")
        if not 0.0 <= self.share <= MAX_SHARE:
            raise ValueError(f"a context block's share must be in [0, {MAX_SHARE}], not {self.share!r}")

    def __bool__(self) -> bool:
        return bool(self.sections) and self.share > 0

    def as_comments(self) -> str:
        """The whole block as comments (what a plain model's prompt starts with when all fit)."""
        return "".join(s.as_comment() for s in self.sections)
