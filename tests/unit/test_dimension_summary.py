"""The batch summary's fold (pure): the same answer in whatever order the summary job's rows
came."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lakehouse.dimension.summary import KEY, fold

_rows = st.lists(
    st.fixed_dictionaries(
        {
            "_kind": st.sampled_from(["change", "tombstone", "error"]),
            "_error_kind": st.none(),
            "_source_table": st.sampled_from(["public.a", "public.b"]),
            "_snapshot_phase": st.sampled_from([None, "true", "last"]),
            "_row_columns": st.sampled_from(['[["id","bigint"]]', '[["id","string"]]']),
            "_key_columns": st.just('["id"]'),
            "topic": st.sampled_from(["t1", "t2"]),
            "partition": st.integers(0, 2),
            "images": st.lists(st.sampled_from(["_image0", "_image1"]), unique=True),
            "n": st.integers(1, 5),
            "max_ts": st.none() | st.integers(0, 10**6),
            "o": st.integers(0, 10**6),
            "ts": st.none() | st.integers(0, 10**6),
            "seq": st.none() | st.text("0123456789", min_size=3, max_size=3),
            "schema": st.none() | st.tuples(st.just(""), st.integers(0, 2), st.integers(0, 9)),
        }
    ),
    max_size=12,
    unique_by=lambda r: tuple(r[k] for k in KEY),
)


def _plain(row):
    """A summary row with its sets as sorted tuples: a set's repr follows its insertion order
    and the string hash seed, so two equal sets can print differently."""
    return repr(
        {k: tuple(sorted(v)) if isinstance(v, frozenset | set) else v for k, v in row.items()}
    )


def _canonical(summary):
    entries, ends, groups = summary
    return (
        sorted(map(_plain, entries)),
        ends,
        sorted(map(_plain, groups)),
    )


@given(_rows, st.randoms())
def test_the_fold_does_not_depend_on_the_rows_order(rows, random):
    shuffled = list(rows)
    random.shuffle(shuffled)
    assert _canonical(fold(rows)) == _canonical(fold(shuffled))
    entries, ends, _ = fold(rows)
    assert sum(e["n"] for e in entries) == sum(r["n"] for r in rows)
    for r in rows:  # every partition read ends past its largest offset
        assert ends[r["topic"]][str(r["partition"])] >= r["o"] + 1
