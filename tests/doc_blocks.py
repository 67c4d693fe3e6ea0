"""The fenced blocks of a docs page, which the docs tests write out and run."""


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info string, body) of every fenced block; a fence is a line starting with ```."""
    blocks, info, body = [], None, []
    for line in text.splitlines():
        if info is None and line.startswith("```"):
            info, body = line[3:].strip(), []
        elif info is not None and line.strip() == "```":
            blocks.append((info, "\n".join(body) + "\n"))
            info = None
        elif info is not None:
            body.append(line)
    return blocks
