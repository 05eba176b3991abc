"""What the rest of the repository says about the code at the cursor (docs/context.md).

`definitions` finds, with jedi, where the names used around the cursor are defined in the
workspace; `stubs` writes those definitions compactly; `neighbours` picks the chunks of other
documents most like the code at the cursor; `block` holds the result as the prompt takes it;
`contexts` makes the blocks ahead of the requests and keeps them per document.
"""

from .block import DEFAULT_SHARE, ContextBlock, ContextSection, block_share
from .contexts import RepoContexts

__all__ = ["DEFAULT_SHARE", "ContextBlock", "ContextSection", "RepoContexts", "block_share"]
