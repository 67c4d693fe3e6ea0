"""Code problems at difficulty 0 (one-line arithmetic and tests) and 1 (one loop or builtin).

Difficulty 0 is what the demo model can just about do (docs/recipe.md section 10: add, max, square,
is_even pass ~20% at T=1). Every maker takes a `random.Random`, draws its test inputs (fixed
edge cases that the wrong solution trips on, plus random ones) and, for parameterised problems
such as `add_7`, the constant.
"""

import random
import string

from passband.curation.suites.code_problem import CodeProblem, int_lists, make_problem


def _pairs(rng: random.Random, fixed: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return fixed + [(rng.randint(-50, 50), rng.randint(-50, 50)) for _ in range(2)]


def _ints(rng: random.Random, fixed: list[int]) -> list[tuple[int]]:
    return [(x,) for x in fixed + [rng.randint(-50, 50) for _ in range(2)]]


def add(rng: random.Random) -> CodeProblem:
    return make_problem("arithmetic", "add(a, b)", "returns the sum of a and b",
                        lambda a, b: sum((a, b)), _pairs(rng, [(2, 3), (0, 0), (-4, 1)]),
                        "def add(a, b):\n    return a + b\n",
                        "def add(a, b):\n    return a - b\n")


def subtract(rng: random.Random) -> CodeProblem:
    return make_problem("arithmetic", "subtract(a, b)", "returns a minus b",
                        lambda a, b: a + -b, _pairs(rng, [(5, 3), (1, 4), (0, 0)]),
                        "def subtract(a, b):\n    return a - b\n",
                        "def subtract(a, b):\n    return b - a\n")


def multiply(rng: random.Random) -> CodeProblem:
    return make_problem("arithmetic", "multiply(a, b)", "returns the product of a and b",
                        lambda a, b: sum([a] * b) if b >= 0 else -sum([a] * -b),
                        _pairs(rng, [(3, 4), (0, 7), (-2, 5)]),
                        "def multiply(a, b):\n    return a * b\n",
                        "def multiply(a, b):\n    return a + b\n")


def max_of_two(rng: random.Random) -> CodeProblem:
    return make_problem("logic", "max_of_two(a, b)", "returns the larger of a and b",
                        lambda a, b: sorted((a, b))[1], _pairs(rng, [(1, 5), (7, 2), (3, 3)]),
                        "def max_of_two(a, b):\n    return a if a > b else b\n",
                        "def max_of_two(a, b):\n    return a\n")


def min_of_two(rng: random.Random) -> CodeProblem:
    return make_problem("logic", "min_of_two(a, b)", "returns the smaller of a and b",
                        lambda a, b: sorted((a, b))[0], _pairs(rng, [(1, 5), (7, 2), (3, 3)]),
                        "def min_of_two(a, b):\n    return a if a < b else b\n",
                        "def min_of_two(a, b):\n    return b\n")


def square(rng: random.Random) -> CodeProblem:
    return make_problem("arithmetic", "square(x)", "returns x squared",
                        lambda x: x ** 2, _ints(rng, [3, 0, -4]),
                        "def square(x):\n    return x * x\n",
                        "def square(x):\n    return 2 * x\n")


def cube(rng: random.Random) -> CodeProblem:
    return make_problem("arithmetic", "cube(x)", "returns x cubed",
                        lambda x: x ** 3, _ints(rng, [3, 0, -2]),
                        "def cube(x):\n    return x * x * x\n",
                        "def cube(x):\n    return x * x\n")


def is_even(rng: random.Random) -> CodeProblem:
    return make_problem("logic", "is_even(n)", "returns True if n is even and False otherwise",
                        lambda n: n / 2 == n // 2, _ints(rng, [4, 7, 0, -3]),
                        "def is_even(n):\n    return n % 2 == 0\n",
                        "def is_even(n):\n    return n % 2 == 1\n")


def is_odd(rng: random.Random) -> CodeProblem:
    return make_problem("logic", "is_odd(n)", "returns True if n is odd and False otherwise",
                        lambda n: n / 2 != n // 2, _ints(rng, [4, 7, 0, -3]),
                        "def is_odd(n):\n    return n % 2 != 0\n",
                        "def is_odd(n):\n    return n % 2 == 0\n")


def negate(rng: random.Random) -> CodeProblem:
    return make_problem("arithmetic", "negate(x)", "returns x with its sign flipped",
                        lambda x: 0 - x, _ints(rng, [5, -3, 0]),
                        "def negate(x):\n    return -x\n",
                        "def negate(x):\n    return x\n")


def absolute(rng: random.Random) -> CodeProblem:
    return make_problem("arithmetic", "absolute(x)", "returns the absolute value of x",
                        lambda x: max(x, -x), _ints(rng, [5, -3, 0]),
                        "def absolute(x):\n    return x if x >= 0 else -x\n",
                        "def absolute(x):\n    return x\n")


def is_positive(rng: random.Random) -> CodeProblem:
    return make_problem("logic", "is_positive(x)",
                        "returns True if x is greater than zero and False otherwise",
                        lambda x: x >= 1, _ints(rng, [5, -3, 0]),
                        "def is_positive(x):\n    return x > 0\n",
                        "def is_positive(x):\n    return x >= 0\n")


def add_constant(rng: random.Random) -> CodeProblem:
    k = rng.randint(1, 20)
    return make_problem("arithmetic", f"add_{k}(x)", f"returns x plus {k}",
                        lambda x: sum((x, k)), _ints(rng, [0, 5]),
                        f"def add_{k}(x):\n    return x + {k}\n",
                        f"def add_{k}(x):\n    return x + {k + 1}\n")


def multiply_constant(rng: random.Random) -> CodeProblem:
    k = rng.randint(2, 12)
    return make_problem("arithmetic", f"multiply_by_{k}(x)", f"returns x times {k}",
                        lambda x: sum([x] * k), _ints(rng, [1, 3]),
                        f"def multiply_by_{k}(x):\n    return x * {k}\n",
                        f"def multiply_by_{k}(x):\n    return x + {k}\n")


def is_multiple(rng: random.Random) -> CodeProblem:
    k = rng.randint(2, 9)
    return make_problem("logic", f"is_multiple_of_{k}(n)",
                        f"returns True if n is a multiple of {k} and False otherwise",
                        lambda n: n // k * k == n, _ints(rng, [k, 2 * k, k + 1, 0]),
                        f"def is_multiple_of_{k}(n):\n    return n % {k} == 0\n",
                        f"def is_multiple_of_{k}(n):\n    return n % {k} != 0\n")


def _words(rng: random.Random, fixed: list[str]) -> list[tuple[str]]:
    drawn = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 8)))
             for _ in range(2)]
    return [(word,) for word in fixed + drawn]


def reverse_string(rng: random.Random) -> CodeProblem:
    return make_problem("strings", "reverse_string(s)", "returns the string s reversed",
                        lambda s: "".join(reversed(s)), _words(rng, ["abc", "", "racecar!"]),
                        "def reverse_string(s):\n    return s[::-1]\n",
                        "def reverse_string(s):\n    return s\n")


def count_vowels(rng: random.Random) -> CodeProblem:
    return make_problem("strings", "count_vowels(s)",
                        "returns how many of the characters of the lowercase string s are "
                        "vowels (a, e, i, o, u)",
                        lambda s: len([c for c in s if c in "aeiou"]),
                        _words(rng, ["hello", "xyz", "queue"]),
                        "def count_vowels(s):\n    return sum(1 for c in s if c in 'aeiou')\n",
                        "def count_vowels(s):\n    return sum(1 for c in s if c in 'aeio')\n")


def sum_list(rng: random.Random) -> CodeProblem:
    return make_problem("lists", "sum_list(nums)", "returns the sum of the numbers in the list "
                        "nums (0 for an empty list)",
                        lambda nums: sum(nums), int_lists(rng, [[1, 2, 3], [], [-5, 5, 7]]),
                        "def sum_list(nums):\n    total = 0\n    for x in nums:\n"
                        "        total += x\n    return total\n",
                        "def sum_list(nums):\n    return max(nums) if nums else 0\n")


def list_max(rng: random.Random) -> CodeProblem:
    return make_problem("lists", "list_max(nums)",
                        "returns the largest number in the non-empty list nums",
                        lambda nums: sorted(nums)[-1], int_lists(rng, [[1, 5, 3], [-2, -7]]),
                        "def list_max(nums):\n    best = nums[0]\n    for x in nums:\n"
                        "        best = x if x > best else best\n    return best\n",
                        "def list_max(nums):\n    return nums[0]\n")


def count_occurrences(rng: random.Random) -> CodeProblem:
    inputs = [([1, 2, 1, 1], 1), ([4, 5], 6), ([], 3)]
    inputs += [([rng.randint(0, 3) for _ in range(6)], rng.randint(0, 3)) for _ in range(2)]
    return make_problem("lists", "count_occurrences(items, x)",
                        "returns how many times x appears in the list items",
                        lambda items, x: len([y for y in items if y == x]), inputs,
                        "def count_occurrences(items, x):\n    return items.count(x)\n",
                        "def count_occurrences(items, x):\n    return int(x in items)\n")


def is_palindrome(rng: random.Random) -> CodeProblem:
    return make_problem("strings", "is_palindrome(s)",
                        "returns True if the string s reads the same forwards and backwards",
                        lambda s: all(s[i] == s[-1 - i] for i in range(len(s))),
                        _words(rng, ["level", "abca", "a", "abba"]),
                        "def is_palindrome(s):\n    return s == s[::-1]\n",
                        "def is_palindrome(s):\n    return s[0] == s[-1]\n")


def factorial(rng: random.Random) -> CodeProblem:
    inputs = [(0,), (1,), (5,), (rng.randint(2, 10),)]
    return make_problem("arithmetic", "factorial(n)",
                        "returns n factorial for an integer n >= 0 (factorial(0) is 1)",
                        _factorial_oracle, inputs,
                        "def factorial(n):\n    result = 1\n    for i in range(2, n + 1):\n"
                        "        result *= i\n    return result\n",
                        "def factorial(n):\n    return n * (n - 1) if n > 1 else n\n")


def _factorial_oracle(n: int) -> int:
    return 1 if n == 0 else n * _factorial_oracle(n - 1)


def sum_to_n(rng: random.Random) -> CodeProblem:
    inputs = [(1,), (4,), (0,), (rng.randint(5, 100),)]
    return make_problem("arithmetic", "sum_to_n(n)",
                        "returns 1 + 2 + ... + n for an integer n >= 0",
                        lambda n: sum(range(n + 1)), inputs,
                        "def sum_to_n(n):\n    return n * (n + 1) // 2\n",
                        "def sum_to_n(n):\n    return n * (n - 1) // 2\n")


def last_char(rng: random.Random) -> CodeProblem:
    return make_problem("strings", "last_char(s)",
                        "returns the last character of the non-empty string s",
                        lambda s: s[len(s) - 1], _words(rng, ["ab", "xyz"]),
                        "def last_char(s):\n    return s[-1]\n",
                        "def last_char(s):\n    return s[0]\n")


def repeat_string(rng: random.Random) -> CodeProblem:
    k = rng.randint(2, 9)
    return make_problem("strings", f"repeat_{k}(s)", f"returns the string s repeated {k} times",
                        lambda s: "".join([s] * k), _words(rng, ["ab"]),
                        f"def repeat_{k}(s):\n    return s * {k}\n",
                        f"def repeat_{k}(s):\n    return s * {k - 1}\n")


def count_greater(rng: random.Random) -> CodeProblem:
    k = rng.randint(0, 20)
    return make_problem("lists", f"count_greater_than_{k}(nums)",
                        f"returns how many numbers in the list nums are greater than {k}",
                        lambda nums: sum(1 for x in nums if x > k),
                        int_lists(rng, [[k, k + 1, k - 1], []]),
                        f"def count_greater_than_{k}(nums):\n"
                        f"    return len([x for x in nums if x > {k}])\n",
                        f"def count_greater_than_{k}(nums):\n"
                        f"    return len([x for x in nums if x >= {k}])\n")


def contains_letter(rng: random.Random) -> CodeProblem:
    letter = rng.choice(string.ascii_lowercase)
    return make_problem("strings", f"contains_{letter}(s)",
                        f"returns True if the string s contains the letter '{letter}'",
                        lambda s: s.find(letter) >= 0,
                        _words(rng, [f"x{letter}", f"{letter}", "", "123"]),
                        f"def contains_{letter}(s):\n    return '{letter}' in s\n",
                        f"def contains_{letter}(s):\n    return s.startswith('{letter}')\n")


DIFFICULTY_0 = (add, subtract, multiply, max_of_two, min_of_two, square, cube, is_even, is_odd,
                negate, absolute, is_positive, add_constant, multiply_constant, is_multiple)
DIFFICULTY_1 = (reverse_string, count_vowels, sum_list, list_max, count_occurrences,
                is_palindrome, factorial, sum_to_n, last_char, repeat_string, count_greater,
                contains_letter)
