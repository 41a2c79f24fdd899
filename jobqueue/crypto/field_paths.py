"""Where an encrypted field sits in a payload, and the paths producers and tasks name to say which
fields to seal: checked (`check_paths`), walked as one tree (`path_tree`), and named in errors
(`display`). No cryptography here: `jobqueue.crypto.envelopes` seals and opens what these name."""

from __future__ import annotations

from typing import Any, Iterable

from jobqueue.model.errors import ValidationError

#: Paths one ``encrypt`` list (or one task's ``encrypted``) may name. Each costs a seal; a request
#: naming 30,000 held the API for 22-29 s. A parent object's path covers all the fields in it.
MAX_PATHS = 100
#: Where a value sits from the payload's root: object keys (str) and list indexes (int).
Parts = tuple[str | int, ...]


class Leaf:
    """A path's last key: the value there is sealed whole (paths inside it with it)."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path


class Branch:
    """A key some paths go through; ``path`` is the first of them (it names a missing field)."""

    __slots__ = ("path", "children")

    def __init__(self, path: str) -> None:
        self.path = path
        self.children: dict[str, Leaf | Branch] = {}


def path_tree(paths: Iterable[str]) -> dict[str, Leaf | Branch]:
    """The paths as a tree of keys, so that one walk seals them all. A path inside another one is
    covered by it: ``card`` sealed whole holds ``card.number``."""
    root: dict[str, Leaf | Branch] = {}
    for path in paths:
        node = root
        *inner, last = path.split(".")
        for part in inner:
            child = node.get(part)
            if isinstance(child, Leaf):
                break
            if child is None:
                child = node[part] = Branch(path)
            node = child.children
        else:
            node[last] = Leaf(path)
    return root


def missing_field(path: str, depth: int, field_prefix: str) -> ValidationError:
    missing = ".".join(path.split(".")[: depth + 1])
    return ValidationError(
        f"{field_prefix}payload.{path}",
        f"is to be encrypted but the payload has no such field ({missing!r} is missing); nothing was written",
    )


def check_paths(paths: Any, field: str) -> tuple[str, ...]:
    """Field paths as given to ``encrypt=`` / ``encrypted=``: a list of at most `MAX_PATHS`
    dotted names (counted before anything else is looked at)."""
    if paths is None:
        return ()
    if isinstance(paths, str) or not isinstance(paths, (list, tuple, set, frozenset)):
        raise ValidationError(field, 'must be a list of dotted field names, e.g. ["card.number", "ssn"]')
    if len(paths) > MAX_PATHS:
        raise ValidationError(
            field,
            f"names {len(paths)} paths; at most {MAX_PATHS} may be encrypted per job "
            "(a path to an object encrypts all of it); nothing was written",
        )
    for path in paths:
        if not isinstance(path, str) or not all(part.strip() for part in path.split(".")) or len(path) > 500:
            raise ValidationError(
                field, f"{path!r} is not a dotted field name (non-empty parts, at most 500 characters)"
            )
    return tuple(dict.fromkeys(paths))


def display(parts: Parts) -> str:
    """``parts`` as an error names the place: ``payload.card.number``, ``payload.items[0]``."""
    return "payload" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in parts)


def field_keys(parts: Parts) -> tuple[str, ...] | None:
    """The keys of a field an ``encrypt`` path can name; None for the payload itself or a place
    inside a list, where no value is ever sealed."""
    if not parts or any(isinstance(part, int) for part in parts):
        return None
    return parts  # type: ignore[return-value]  # no int in it
