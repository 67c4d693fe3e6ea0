"""Code problems at difficulty 0 (one-line arithmetic and tests) and 1 (one loop or builtin).

Difficulty 0 is what the demo model can just about do (docs/recipe.md section 10: add, max, square,
is_even pass ~20% at T=1). Every maker takes a `random.Random`, draws its test inputs (fixed
edge cases that the wrong solution trips on, plus random ones) and, for parameterised problems
such as `add_7`, the constant. Difficulty 0 holds 175 distinct prompts, room for a ~100-problem
eval set plus a training pool; the parameterised makers' constant ranges supply most of them.
"""

import random
import string

from passband.curation.suites.code_problem import CodeProblem, int_lists, make_problem


def _pairs(rng: random.Random, fixed: list[tuple[int, int]], low: int = -50
           ) -> list[tuple[int, int]]:
    return fixed + [(rng.randint(low, 50), rng.randint(low, 50)) for _ in range(2)]


def _triples(rng: random.Random, fixed: list[tuple[int, int, int]]
             ) -> list[tuple[int, int, int]]:
    return fixed + [tuple(rng.randint(-50, 50) for _ in range(3)) for _ in range(2)]


def _ints(rng: random.Random, fixed: list[int], low: int = -50) -> list[tuple[int]]:
    return [(x,) for x in fixed + [rng.randint(low, 50) for _ in range(2)]]


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


def double(rng: random.Random) -> CodeProblem:
    return make_problem("arithmetic", "double(x)", "returns x times two",
                        lambda x: x + x, _ints(rng, [3, 0, -4]),
                        "def double(x):\n    return 2 * x\n",
                        "def double(x):\n    return x + 2\n")


def halve(rng: random.Random) -> CodeProblem:
    # Floor, not truncation: int(x / 2) is the bug, caught by negative odd numbers.
    return make_problem("arithmetic", "halve(x)",
                        "returns x divided by 2, rounded down to an integer",
                        lambda x: (x - x % 2) // 2, _ints(rng, [6, 7, 0, -3]),
                        "def halve(x):\n    return x // 2\n",
                        "def halve(x):\n    return int(x / 2)\n")


def average_of_two(rng: random.Random) -> CodeProblem:
    # A float mean, so (1, 2) -> 1.5 rejects floor division as well as the precedence bug.
    return make_problem("arithmetic", "average_of_two(a, b)",
                        "returns the average of a and b as a float",
                        lambda a, b: sum((a, b)) / len((a, b)),
                        _pairs(rng, [(2, 4), (1, 2), (0, 0)]),
                        "def average_of_two(a, b):\n    return (a + b) / 2\n",
                        "def average_of_two(a, b):\n    return a + b / 2\n")


def sum_of_three(rng: random.Random) -> CodeProblem:
    return make_problem("arithmetic", "sum_of_three(a, b, c)",
                        "returns the sum of a, b and c",
                        lambda a, b, c: sum((a, b, c)), _triples(rng, [(1, 2, 3), (0, 0, 0)]),
                        "def sum_of_three(a, b, c):\n    return a + b + c\n",
                        "def sum_of_three(a, b, c):\n    return a + b\n")


def max_of_three(rng: random.Random) -> CodeProblem:
    return make_problem("logic", "max_of_three(a, b, c)", "returns the largest of a, b and c",
                        lambda a, b, c: sorted((a, b, c))[2],
                        _triples(rng, [(1, 2, 3), (3, 2, 1), (2, 9, 4), (5, 5, 5)]),
                        "def max_of_three(a, b, c):\n    return max(a, b, c)\n",
                        "def max_of_three(a, b, c):\n    return max(a, b)\n")


def min_of_three(rng: random.Random) -> CodeProblem:
    return make_problem("logic", "min_of_three(a, b, c)", "returns the smallest of a, b and c",
                        lambda a, b, c: sorted((a, b, c))[0],
                        _triples(rng, [(3, 2, 1), (1, 2, 3), (4, 0, 9), (5, 5, 5)]),
                        "def min_of_three(a, b, c):\n    return min(a, b, c)\n",
                        "def min_of_three(a, b, c):\n    return min(a, b)\n")


def difference_abs(rng: random.Random) -> CodeProblem:
    return make_problem("arithmetic", "difference_abs(a, b)",
                        "returns the absolute difference between a and b",
                        lambda a, b: max(a, b) - min(a, b), _pairs(rng, [(3, 5), (5, 3), (0, 0)]),
                        "def difference_abs(a, b):\n    return abs(a - b)\n",
                        "def difference_abs(a, b):\n    return a - b\n")


def remainder(rng: random.Random) -> CodeProblem:
    # Non-negative a and positive b keep the problem clear of Python's sign rules for %.
    inputs = [(7, 3), (6, 3), (2, 5)] + [(rng.randint(0, 50), rng.randint(1, 9)) for _ in range(2)]
    return make_problem("arithmetic", "remainder(a, b)",
                        "returns the remainder of a divided by b, for integers a >= 0 and b > 0",
                        lambda a, b: a - a // b * b, inputs,
                        "def remainder(a, b):\n    return a % b\n",
                        "def remainder(a, b):\n    return a // b\n")


def rectangle_area(rng: random.Random) -> CodeProblem:
    return make_problem("arithmetic", "rectangle_area(width, height)",
                        "returns the area of a rectangle with the given width and height",
                        lambda width, height: sum([width] * height),
                        _pairs(rng, [(3, 4), (0, 5), (1, 7)], low=0),
                        "def rectangle_area(width, height):\n    return width * height\n",
                        "def rectangle_area(width, height):\n    return width + height\n")


def square_perimeter(rng: random.Random) -> CodeProblem:
    return make_problem("arithmetic", "square_perimeter(side)",
                        "returns the perimeter of a square whose sides have length side",
                        lambda side: sum([side] * 4), _ints(rng, [3, 1, 5], low=0),
                        "def square_perimeter(side):\n    return 4 * side\n",
                        "def square_perimeter(side):\n    return side * side\n")


def sign(rng: random.Random) -> CodeProblem:
    return make_problem("logic", "sign(x)",
                        "returns 1 if x is positive, -1 if x is negative and 0 if x is zero",
                        lambda x: (x > 0) - (x < 0), _ints(rng, [5, -3, 0]),
                        "def sign(x):\n    return 1 if x > 0 else -1 if x < 0 else 0\n",
                        "def sign(x):\n    return 1 if x > 0 else -1\n")


def is_negative(rng: random.Random) -> CodeProblem:
    return make_problem("logic", "is_negative(x)",
                        "returns True if x is less than zero and False otherwise",
                        lambda x: x <= -1, _ints(rng, [5, -3, 0]),
                        "def is_negative(x):\n    return x < 0\n",
                        "def is_negative(x):\n    return x <= 0\n")


def is_zero(rng: random.Random) -> CodeProblem:
    return make_problem("logic", "is_zero(x)", "returns True if x is zero and False otherwise",
                        lambda x: not x, _ints(rng, [0, 5, -3]),
                        "def is_zero(x):\n    return x == 0\n",
                        "def is_zero(x):\n    return x <= 0\n")


def subtract_constant(rng: random.Random) -> CodeProblem:
    k = rng.randint(1, 30)
    return make_problem("arithmetic", f"subtract_{k}(x)", f"returns x minus {k}",
                        lambda x: x + -k, _ints(rng, [0, 5]),
                        f"def subtract_{k}(x):\n    return x - {k}\n",
                        f"def subtract_{k}(x):\n    return {k} - x\n")


def greater_than_constant(rng: random.Random) -> CodeProblem:
    k = rng.randint(0, 30)
    return make_problem("logic", f"is_greater_than_{k}(x)",
                        f"returns True if x is greater than {k} and False otherwise",
                        lambda x: x >= k + 1, _ints(rng, [k, k + 1, k - 1]),
                        f"def is_greater_than_{k}(x):\n    return x > {k}\n",
                        f"def is_greater_than_{k}(x):\n    return x >= {k}\n")


def less_than_constant(rng: random.Random) -> CodeProblem:
    k = rng.randint(0, 30)
    return make_problem("logic", f"is_less_than_{k}(x)",
                        f"returns True if x is less than {k} and False otherwise",
                        lambda x: x <= k - 1, _ints(rng, [k, k - 1, k + 1]),
                        f"def is_less_than_{k}(x):\n    return x < {k}\n",
                        f"def is_less_than_{k}(x):\n    return x <= {k}\n")


def remainder_constant(rng: random.Random) -> CodeProblem:
    k = rng.randint(2, 20)
    return make_problem("arithmetic", f"remainder_{k}(n)",
                        f"returns the remainder of the integer n >= 0 divided by {k}",
                        lambda n: n - n // k * k, _ints(rng, [2 * k + 1, 1, 0], low=0),
                        f"def remainder_{k}(n):\n    return n % {k}\n",
                        f"def remainder_{k}(n):\n    return n // {k}\n")


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
                negate, absolute, is_positive, add_constant, multiply_constant, is_multiple,
                double, halve, average_of_two, sum_of_three, max_of_three, min_of_three,
                difference_abs, remainder, rectangle_area, square_perimeter, sign, is_negative,
                is_zero, subtract_constant, greater_than_constant, less_than_constant,
                remainder_constant)
DIFFICULTY_1 = (reverse_string, count_vowels, sum_list, list_max, count_occurrences,
                is_palindrome, factorial, sum_to_n, last_char, repeat_string, count_greater,
                contains_letter)
