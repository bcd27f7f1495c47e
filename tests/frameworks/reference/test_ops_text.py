"""The text family (RegexFullMatch, StringConcat, StringNormalizer, StringSplit,
TfIdfVectorizer) against ONNX's ReferenceEvaluator, StringNormalizer against onnxruntime
(ONNX's evaluator removes stop words word by word inside strings, strips accents, and
compares case-insensitively only after the case change): strings compared exactly."""
import numpy as np
import pytest

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import Deep500Error, ShapeError
from tests.frameworks.reference.onnx_oracle import onnx_run, onnxruntime_run


def strings(*values, shape=None):
    array = np.array(values, dtype=object)
    return array if shape is None else array.reshape(shape)


def check(op_type, inputs, attributes=None, outputs=1, expected=None):
    if expected is None:
        expected = onnx_run(op_type, inputs, attributes, outputs=outputs)
    got = create_operator(op_type, **(attributes or {})).forward(*inputs)
    got = got if isinstance(got, tuple) else (got,)
    for e, g in zip(expected, got):
        assert g.shape == e.shape, (g.shape, e.shape)
        # Strings are object arrays here; the oracles return some as fixed-width "U".
        assert g.dtype == e.dtype or g.dtype.kind in "OU" and e.dtype.kind in "OU"
        np.testing.assert_array_equal(g, e)
    return got


@pytest.mark.parametrize("pattern,values", [
    (r"[a-z]+\d*", strings("abc", "abc12", "12abc", "", "ABC")),
    (r"(\w+)@(\w+)\.com", strings("me@mail.com", "me@mail.org", "@mail.com", shape=(3, 1))),
    (r"\bword\b.*", strings("word up", "words", "word")),
    (r"a|b", strings(shape=(0, 2)))])
def test_regex_full_match(pattern, values):
    check("RegexFullMatch", [values], {"pattern": pattern})


def test_an_unreadable_pattern_names_itself():
    with pytest.raises(Deep500Error, match=r"pattern '\(a' is not a regular expression"):
        create_operator("RegexFullMatch", pattern="(a")


@pytest.mark.parametrize("x,y", [
    (strings("a", "bc"), strings("x", "yz")),
    (strings("a", "b", "c", shape=(3, 1)), strings("-", "+")),
    (strings("ü", ""), strings("€", "")),
    (strings("solo", shape=()), strings("s", "t"))])
def test_string_concat(x, y):
    check("StringConcat", [x, y])


def test_string_concat_needs_strings():
    with pytest.raises(ShapeError, match="Y must be a string tensor"):
        create_operator("StringConcat").forward(strings("a"), np.float32([1]))


MONDAY = strings("Monday", "tuesday", "MONDAY", "wednesday")


@pytest.mark.parametrize("x,attributes", [
    (MONDAY, {"stopwords": ["monday"], "case_change_action": "UPPER"}),
    (MONDAY, {"stopwords": ["monday"], "is_case_sensitive": 1}),
    (MONDAY.reshape(1, 4), {"stopwords": ["Monday", "tuesday"], "case_change_action": "LOWER"}),
    (strings("monday", "MONDAY"), {"stopwords": ["monday"]}),
    (strings("monday", shape=(1, 1)), {"stopwords": ["monday"], "is_case_sensitive": 1}),
    (MONDAY, {})])
def test_string_normalizer(x, attributes):
    pytest.importorskip("onnxruntime")
    # onnxruntime builds the locale it is given; its default en_US.UTF-8 may be missing.
    expected = onnxruntime_run("StringNormalizer", [x], {**attributes, "locale": "C.UTF-8"})
    check("StringNormalizer", [x], attributes, expected=expected)


def test_string_normalizer_takes_one_row():
    with pytest.raises(ShapeError, match=r"\[C\] or \[1, C\]"):
        create_operator("StringNormalizer").forward(MONDAY.reshape(2, 2))


@pytest.mark.parametrize("x,attributes", [
    (strings("a.b.c", "d", ""), {"delimiter": "."}),
    (strings("a--b-", "-", shape=(1, 2)), {"delimiter": "-"}),
    (strings("  two  words ", "one"), {}),
    (strings(" x  y z ", "a b"), {"delimiter": ""}),
    (strings("a b c d", "e f", shape=(2, 1)), {"maxsplit": 1}),
    (strings("a::b::c", "::"), {"delimiter": "::", "maxsplit": 5}),
    (strings(shape=(0,)), {})])
def test_string_split(x, attributes):
    check("StringSplit", [x], attributes, outputs=2)


POOL = {"ngram_counts": [0, 3], "ngram_indexes": [4, 0, 1, 2, 3, 5],
        "pool_int64s": [2, 3, 5, 3, 5, 5, 2, 7, 3]}


@pytest.mark.parametrize("x", [
    np.array([2, 3, 5, 5, 2, 7, 3, 3, 5], np.int64),
    np.array([[2, 3, 5, 3, 5], [5, 2, 7, 3, 1]], np.int32)])
@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("grams,skips", [((1, 1), 0), ((2, 2), 0), ((1, 2), 2), ((2, 2), 4)])
def test_tfidf_vectorizer_on_integers(x, mode, grams, skips):
    attributes = {**POOL, "mode": mode, "min_gram_length": grams[0],
                  "max_gram_length": grams[1], "max_skip_count": skips,
                  "weights": [0.5, 1.0, 2.0, 0.25, 3.0, 1.5]}
    expected = None
    if mode != "TF":
        # ONNX's evaluator scales output element j by weights[j]; the specification, and
        # onnxruntime, scale the count of the pool's i-th n-gram by weights[i].
        pytest.importorskip("onnxruntime")
        expected = onnxruntime_run("TfIdfVectorizer", [x], attributes)
    check("TfIdfVectorizer", [x], attributes, expected=expected)


def test_tfidf_vectorizer_on_strings():
    attributes = {"ngram_counts": [0, 2], "ngram_indexes": [0, 1, 2],
                  "pool_strings": ["to", "be", "to", "be"], "mode": "TF",
                  "min_gram_length": 1, "max_gram_length": 2, "max_skip_count": 1}
    check("TfIdfVectorizer", [strings("to", "be", "or", "not", "to", "be")], attributes)
