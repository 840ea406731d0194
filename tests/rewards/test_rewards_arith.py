import pytest

from rewards.arith import ArithVerifier, extract_final_number


@pytest.mark.parametrize("text,expected", [
    ("The answer is \\boxed{12}.", 12),
    ("3 + 4 = 7, so \\boxed{7}", 7),
    ("\\boxed{7} ... but wait 9", 7),            # boxed wins over later numbers
    ("12 - 5 = 7", 7),                          # else the last number
    ("It is 1,024.", 1024),
    ("negative: -3", -3),
    ("no digits here", None),
    ("2.5", None),                              # not an integer
    ("\\boxed{}  then 4", 4),                   # an empty box falls back to the text
])
def test_extract_final_number(text, expected):
    assert extract_final_number(text) == expected


def test_verifier_compares_integers():
    v = ArithVerifier()
    assert v(None, "5 + 3 = \\boxed{8}", {"answer": 8}) == 1.0
    assert v(None, "5 + 3 = 9", {"answer": 8}) == 0.0
    assert v(None, "I don't know", {"answer": 8}) == 0.0
