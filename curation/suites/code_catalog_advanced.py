"""Code problems at difficulty 2 (a loop with state) and 3 (a small algorithm).

Each oracle computes expected results a different way from the solution text (builtins vs
loops, recursion vs iteration), so a slip in one shows up when the tests run the other.
"""

import collections
import itertools
import math
import random
import string

from passband.curation.suites.code_problem import CodeProblem, int_lists, make_problem


def _sentences(rng: random.Random, fixed: list[str]) -> list[tuple[str]]:
    words = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "fast", "red"]
    drawn = " ".join(rng.choice(words) for _ in range(rng.randint(2, 6)))
    return [(sentence,) for sentence in fixed + [drawn]]


def fizzbuzz(rng: random.Random) -> CodeProblem:
    def oracle(n: int) -> list[str]:
        labels = {0: "FizzBuzz", 3: "Fizz", 5: "Buzz", 6: "Fizz", 9: "Fizz", 10: "Buzz",
                  12: "Fizz"}  # i % 15 -> label
        return [labels.get(i % 15, str(i)) for i in range(1, n + 1)]
    solution = ("def fizzbuzz(n):\n    out = []\n    for i in range(1, n + 1):\n"
                "        if i % 15 == 0:\n            out.append('FizzBuzz')\n"
                "        elif i % 3 == 0:\n            out.append('Fizz')\n"
                "        elif i % 5 == 0:\n            out.append('Buzz')\n"
                "        else:\n            out.append(str(i))\n    return out\n")
    return make_problem("logic", "fizzbuzz(n)",
                        "returns a list of strings for 1..n: 'Fizz' for multiples of 3, 'Buzz' "
                        "for multiples of 5, 'FizzBuzz' for multiples of both, else the number",
                        oracle, [(15,), (1,), (rng.randint(5, 30),)], solution,
                        solution.replace("'Fizz')", "'Buzz')", 1))


def is_prime(rng: random.Random) -> CodeProblem:
    return make_problem("arithmetic", "is_prime(n)",
                        "returns True if the integer n is a prime number and False otherwise",
                        lambda n: n > 1 and all(n % d for d in range(2, n)),
                        [(2,), (9,), (1,), (0,), (17,), (rng.randint(20, 200),)],
                        "def is_prime(n):\n    if n < 2:\n        return False\n"
                        "    d = 2\n    while d * d <= n:\n        if n % d == 0:\n"
                        "            return False\n        d += 1\n    return True\n",
                        "def is_prime(n):\n    return n == 2 or n % 2 == 1\n")


def running_sum(rng: random.Random) -> CodeProblem:
    return make_problem("lists", "running_sum(nums)",
                        "returns the list whose i-th element is the sum of nums[0..i]",
                        lambda nums: list(itertools.accumulate(nums)),
                        int_lists(rng, [[1, 2, 3], []], min_len=2),
                        "def running_sum(nums):\n    out, total = [], 0\n    for x in nums:\n"
                        "        total += x\n        out.append(total)\n    return out\n",
                        "def running_sum(nums):\n    return list(nums)\n")


def dedupe(rng: random.Random) -> CodeProblem:
    return make_problem("lists", "dedupe(items)",
                        "returns the list items without repeated elements, keeping the first "
                        "occurrence of each in its original order",
                        lambda items: list(dict.fromkeys(items)),
                        int_lists(rng, [[3, 1, 3, 2, 1], []], low=0, min_len=2),
                        "def dedupe(items):\n    seen, out = set(), []\n    for x in items:\n"
                        "        if x not in seen:\n            seen.add(x)\n"
                        "            out.append(x)\n    return out\n",
                        "def dedupe(items):\n    return sorted(set(items))\n")


def count_words(rng: random.Random) -> CodeProblem:
    return make_problem("strings", "count_words(s)",
                        "returns the number of words in s, where words are separated by single "
                        "spaces and s has no leading or trailing spaces (0 for an empty string)",
                        lambda s: len(s.split()), _sentences(rng, ["hello world", "", "one"]),
                        "def count_words(s):\n    return len(s.split(' ')) if s else 0\n",
                        "def count_words(s):\n    return s.count(' ')\n")


def capitalize_words(rng: random.Random) -> CodeProblem:
    return make_problem("strings", "capitalize_words(s)",
                        "returns s with the first letter of every space-separated word in upper "
                        "case (s is lowercase words separated by single spaces)",
                        lambda s: " ".join(w[:1].upper() + w[1:] for w in s.split(" ")),
                        _sentences(rng, ["hello world", "a"]),
                        "def capitalize_words(s):\n"
                        "    return ' '.join(w.capitalize() for w in s.split(' '))\n",
                        "def capitalize_words(s):\n    return s.upper()\n")


def filter_even(rng: random.Random) -> CodeProblem:
    return make_problem("lists", "filter_even(nums)",
                        "returns the even numbers of nums in their original order",
                        lambda nums: [x for x in nums if x / 2 == x // 2],
                        int_lists(rng, [[1, 2, 3, 4], [5]], min_len=2),
                        "def filter_even(nums):\n    return [x for x in nums if x % 2 == 0]\n",
                        "def filter_even(nums):\n    return [x for x in nums if x % 2]\n")


def digit_sum(rng: random.Random) -> CodeProblem:
    return make_problem("arithmetic", "digit_sum(n)",
                        "returns the sum of the decimal digits of the integer n >= 0",
                        lambda n: sum(map(int, str(n))), [(0,), (123,), (rng.randint(10, 99999),)],
                        "def digit_sum(n):\n    total = 0\n    while n:\n"
                        "        total += n % 10\n        n //= 10\n    return total\n",
                        "def digit_sum(n):\n    return len(str(n))\n")


def gcd(rng: random.Random) -> CodeProblem:
    inputs = [(12, 18), (7, 5), (0, 4)] + [(rng.randint(1, 200), rng.randint(1, 200))]
    return make_problem("arithmetic", "gcd(a, b)",
                        "returns the greatest common divisor of the integers a, b >= 0 "
                        "(not both zero)",
                        math.gcd, inputs,
                        "def gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a\n",
                        "def gcd(a, b):\n    return min(a, b)\n")


def fibonacci(rng: random.Random) -> CodeProblem:
    def oracle(n: int) -> int:
        return n if n < 2 else oracle(n - 1) + oracle(n - 2)
    return make_problem("arithmetic", "fibonacci(n)",
                        "returns the n-th Fibonacci number, where fibonacci(0) = 0 and "
                        "fibonacci(1) = 1",
                        oracle, [(0,), (1,), (2,), (3,), (10,), (rng.randint(4, 20),)],
                        "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n"
                        "        a, b = b, a + b\n    return a\n",
                        "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n + 1):\n"
                        "        a, b = b, a + b\n    return a\n")


def second_largest(rng: random.Random) -> CodeProblem:
    return make_problem("lists", "second_largest(nums)",
                        "returns the second largest distinct value in nums (nums holds at least "
                        "two distinct values)",
                        lambda nums: sorted(set(nums))[-2],
                        [([5, 5, 3],), ([1, 2],), ([4, 9, 9, 1, 4],),
                         (rng.sample(range(-9, 10), 4) * 2,)],
                        "def second_largest(nums):\n    top = max(nums)\n"
                        "    return max(x for x in nums if x != top)\n",
                        "def second_largest(nums):\n    return sorted(nums)[-2]\n")


def flatten(rng: random.Random) -> CodeProblem:
    inputs = [([[1, 2], [3], []],), ([],), ([[rng.randint(0, 9)], [rng.randint(0, 9), 5]],)]
    return make_problem("lists", "flatten(lists)",
                        "returns one list with the elements of the lists in `lists`, in order",
                        lambda lists: list(itertools.chain.from_iterable(lists)), inputs,
                        "def flatten(lists):\n    return [x for inner in lists for x in inner]\n",
                        "def flatten(lists):\n    return lists[0] if lists else []\n")


def multiples(rng: random.Random) -> CodeProblem:
    k = rng.randint(2, 12)
    return make_problem("lists", f"multiples_of_{k}(n)",
                        f"returns the list of the first n positive multiples of {k}",
                        lambda n: [k * i for i in range(1, n + 1)], [(3,), (0,), (1,)],
                        f"def multiples_of_{k}(n):\n"
                        f"    return list(range({k}, {k} * n + 1, {k}))\n",
                        f"def multiples_of_{k}(n):\n    return list(range(0, {k} * n, {k}))\n")


def clip(rng: random.Random) -> CodeProblem:
    k = rng.randint(0, 9)
    return make_problem("lists", f"clip_to_{k}(nums)",
                        f"returns nums with every number greater than {k} replaced by {k}",
                        lambda nums: [min(x, k) for x in nums],
                        int_lists(rng, [[k + 3, k, k - 1]], min_len=2),
                        f"def clip_to_{k}(nums):\n"
                        f"    return [x if x <= {k} else {k} for x in nums]\n",
                        f"def clip_to_{k}(nums):\n    return [x for x in nums if x <= {k}]\n")


def count_multiples(rng: random.Random) -> CodeProblem:
    k = rng.randint(2, 9)
    return make_problem("lists", f"count_multiples_of_{k}(nums)",
                        f"returns how many numbers in the list nums are multiples of {k}",
                        lambda nums: len([x for x in nums if x // k * k == x]),
                        int_lists(rng, [[k, k + 1, 0, 3 * k], []], min_len=2),
                        f"def count_multiples_of_{k}(nums):\n"
                        f"    return sum(1 for x in nums if x % {k} == 0)\n",
                        f"def count_multiples_of_{k}(nums):\n"
                        f"    return sum(1 for x in nums if x % {k} != 0)\n")


def sum_multiples_below(rng: random.Random) -> CodeProblem:
    k = rng.randint(2, 9)
    return make_problem("arithmetic", f"sum_multiples_of_{k}_below(n)",
                        f"returns the sum of the positive multiples of {k} that are less than n",
                        lambda n: sum(x for x in range(1, n) if x % k == 0),
                        [(3 * k,), (1,), (rng.randint(10, 100),)],
                        f"def sum_multiples_of_{k}_below(n):\n"
                        f"    return sum(range({k}, n, {k}))\n",
                        f"def sum_multiples_of_{k}_below(n):\n"
                        f"    return sum(range({k}, n + 1, {k}))\n")


def run_length_encode(rng: random.Random) -> CodeProblem:
    drawn = "".join(rng.choice("ab") * rng.randint(1, 3) for _ in range(4))
    return make_problem("strings", "run_length_encode(s)",
                        "returns s with each run of equal characters written as the character "
                        "followed by the run length, e.g. 'aaabcc' -> 'a3b1c2'",
                        lambda s: "".join(f"{ch}{len(list(run))}" for ch, run in
                                          itertools.groupby(s)),
                        [("aaabcc",), ("aabaa",), ("",), (drawn,)],
                        "def run_length_encode(s):\n    out, i = '', 0\n    while i < len(s):\n"
                        "        j = i\n        while j < len(s) and s[j] == s[i]:\n"
                        "            j += 1\n        out += s[i] + str(j - i)\n        i = j\n"
                        "    return out\n",
                        "def run_length_encode(s):\n    from collections import Counter\n"
                        "    return ''.join(f'{c}{n}' for c, n in Counter(s).items())\n")


def balanced_brackets(rng: random.Random) -> CodeProblem:
    def oracle(s: str) -> bool:
        while any(pair in s for pair in ("()", "[]", "{}")):
            s = s.replace("()", "").replace("[]", "").replace("{}", "")
        return s == ""
    drawn = "".join(rng.choice("()[]") for _ in range(6))
    return make_problem("strings", "balanced_brackets(s)",
                        "returns True if the brackets ()[]{} in s (which holds only brackets) are "
                        "balanced and properly nested",
                        oracle, [("([]{})",), ("([)]",), ("((",), ("",), (drawn,)],
                        "def balanced_brackets(s):\n    pairs = {')': '(', ']': '[', '}': '{'}\n"
                        "    stack = []\n    for c in s:\n        if c in pairs:\n"
                        "            if not stack or stack.pop() != pairs[c]:\n"
                        "                return False\n        else:\n            stack.append(c)\n"
                        "    return not stack\n",
                        "def balanced_brackets(s):\n    return all(s.count(a) == s.count(b) "
                        "for a, b in ('()', '[]', '{}'))\n")


def is_anagram(rng: random.Random) -> CodeProblem:
    word = "".join(rng.choice("abcde") for _ in range(5))
    shuffled = "".join(rng.sample(word, len(word)))
    return make_problem("strings", "is_anagram(a, b)",
                        "returns True if the strings a and b contain the same letters the same "
                        "number of times",
                        lambda a, b: collections.Counter(a) == collections.Counter(b),
                        [("listen", "silent"), ("aab", "abb"), ("ab", "abc"), (word, shuffled)],
                        "def is_anagram(a, b):\n    return sorted(a) == sorted(b)\n",
                        "def is_anagram(a, b):\n    return set(a) == set(b)\n")


def merge_sorted(rng: random.Random) -> CodeProblem:
    drawn = tuple(sorted(rng.randint(0, 20) for _ in range(size)) for size in (3, 4))
    return make_problem("lists", "merge_sorted(a, b)",
                        "returns one sorted list with all elements of the sorted lists a and b",
                        lambda a, b: sorted(a + b), [([1, 4, 6], [2, 3, 7]), ([], [1]), drawn],
                        "def merge_sorted(a, b):\n    out, i, j = [], 0, 0\n"
                        "    while i < len(a) and j < len(b):\n"
                        "        if a[i] <= b[j]:\n            out.append(a[i]); i += 1\n"
                        "        else:\n            out.append(b[j]); j += 1\n"
                        "    return out + a[i:] + b[j:]\n",
                        "def merge_sorted(a, b):\n    return a + b\n")


def to_roman(rng: random.Random) -> CodeProblem:
    def oracle(n: int) -> str:
        digits = [("", "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX"),
                  ("", "X", "XX", "XXX", "XL", "L", "LX", "LXX", "LXXX", "XC"),
                  ("", "C", "CC", "CCC", "CD", "D", "DC", "DCC", "DCCC", "CM")]
        return "M" * (n // 1000) + "".join(digits[p][n // 10 ** p % 10] for p in (2, 1, 0))
    solution = ("def to_roman(n):\n    values = [(1000, 'M'), (900, 'CM'), (500, 'D'), "
                "(400, 'CD'), (100, 'C'), (90, 'XC'), (50, 'L'), (40, 'XL'), (10, 'X'), "
                "(9, 'IX'), (5, 'V'), (4, 'IV'), (1, 'I')]\n    out = ''\n"
                "    for value, letters in values:\n        while n >= value:\n"
                "            out += letters\n            n -= value\n    return out\n")
    wrong = solution.replace("(900, 'CM'), ", "").replace("(400, 'CD'), ", "").replace(
        "(90, 'XC'), ", "").replace("(40, 'XL'), ", "").replace("(9, 'IX'), ", "").replace(
        "(4, 'IV'), ", "")
    return make_problem("strings", "to_roman(n)",
                        "returns the Roman numeral for the integer 1 <= n <= 3999 as a string",
                        oracle, [(4,), (14,), (1994,), (rng.randint(1, 3999),)], solution, wrong)


def to_binary(rng: random.Random) -> CodeProblem:
    return make_problem("strings", "to_binary(n)",
                        "returns the binary representation of the integer n >= 0 as a string "
                        "without a prefix, e.g. 5 -> '101' and 0 -> '0'",
                        lambda n: format(n, "b"), [(5,), (0,), (rng.randint(2, 1000),)],
                        "def to_binary(n):\n    if n == 0:\n        return '0'\n    out = ''\n"
                        "    while n:\n        out = str(n % 2) + out\n        n //= 2\n"
                        "    return out\n",
                        "def to_binary(n):\n    return bin(n)\n")


def common_prefix(rng: random.Random) -> CodeProblem:
    stem = "".join(rng.choice("abc") for _ in range(3))
    drawn = [stem + "x", stem + "yz", stem]
    return make_problem("strings", "longest_common_prefix(words)",
                        "returns the longest string that every string in the non-empty list "
                        "words starts with",
                        _prefix_oracle,
                        [(["flower", "flow", "flight"],), (["dog", "cat"],), (["same"],), (drawn,)],
                        "def longest_common_prefix(words):\n    prefix = words[0]\n"
                        "    for w in words[1:]:\n        while not w.startswith(prefix):\n"
                        "            prefix = prefix[:-1]\n    return prefix\n",
                        "def longest_common_prefix(words):\n    return words[0]\n")


def _prefix_oracle(words: list[str]) -> str:
    length = 0
    while all(len(w) > length and w[length] == words[0][length] for w in words):
        length += 1
    return words[0][:length]


def caesar(rng: random.Random) -> CodeProblem:
    k = rng.randint(1, 25)
    shifted = string.ascii_lowercase[k:] + string.ascii_lowercase[:k]
    table = str.maketrans(string.ascii_lowercase, shifted)
    return make_problem("strings", f"caesar_{k}(s)",
                        f"returns s with every lowercase letter shifted {k} places forward in the "
                        f"alphabet, wrapping from 'z' to 'a', and other characters unchanged",
                        lambda s: s.translate(table), [("xyz abc!",), ("",), ("hello",)],
                        f"def caesar_{k}(s):\n    return ''.join(chr((ord(c) - 97 + {k}) % 26 + 97)"
                        f" if 'a' <= c <= 'z' else c for c in s)\n",
                        f"def caesar_{k}(s):\n    return ''.join(chr(ord(c) + {k})"
                        f" if 'a' <= c <= 'z' else c for c in s)\n")


def word_frequencies(rng: random.Random) -> CodeProblem:
    return make_problem("strings", "word_frequencies(s)",
                        "returns a dict mapping each space-separated word of s to how many times "
                        "it occurs",
                        lambda s: dict(collections.Counter(s.split())),
                        _sentences(rng, ["a b a", "x"]),
                        "def word_frequencies(s):\n    counts = {}\n    for w in s.split():\n"
                        "        counts[w] = counts.get(w, 0) + 1\n    return counts\n",
                        "def word_frequencies(s):\n    return {w: 1 for w in s.split()}\n")


def transpose(rng: random.Random) -> CodeProblem:
    rows, cols = rng.randint(1, 3), rng.randint(2, 4)
    drawn = [[rng.randint(0, 9) for _ in range(cols)] for _ in range(rows)]
    return make_problem("lists", "transpose(matrix)",
                        "returns the transpose of matrix, a non-empty list of equal-length rows",
                        lambda m: [list(col) for col in zip(*m)],
                        [([[1, 2, 3], [4, 5, 6]],), ([[7]],), (drawn,)],
                        "def transpose(matrix):\n    return [[row[j] for row in matrix] "
                        "for j in range(len(matrix[0]))]\n",
                        "def transpose(matrix):\n    return matrix\n")


def primes_up_to(rng: random.Random) -> CodeProblem:
    return make_problem("arithmetic", "primes_up_to(n)",
                        "returns the list of all primes p with p <= n, in increasing order",
                        lambda n: [p for p in range(2, n + 1) if all(p % d for d in range(2, p))],
                        [(13,), (1,), (2,), (rng.randint(3, 60),)],
                        "def primes_up_to(n):\n    sieve = [True] * (n + 1)\n    out = []\n"
                        "    for p in range(2, n + 1):\n        if sieve[p]:\n"
                        "            out.append(p)\n            for q in range(p * p, n + 1, p):\n"
                        "                sieve[q] = False\n    return out\n",
                        "def primes_up_to(n):\n    return [p for p in range(2, n) "
                        "if all(p % d for d in range(2, p))]\n")


def longest_run(rng: random.Random) -> CodeProblem:
    return make_problem("lists", "longest_run(nums)",
                        "returns the length of the longest run of equal adjacent elements in "
                        "nums (0 for an empty list)",
                        lambda nums: max((len(list(g)) for _, g in itertools.groupby(nums)),
                                         default=0),
                        int_lists(rng, [[1, 1, 2, 1], [], [3, 3, 3]], low=0, min_len=2),
                        "def longest_run(nums):\n    best = run = 0\n"
                        "    for i, x in enumerate(nums):\n"
                        "        run = run + 1 if i and nums[i - 1] == x else 1\n"
                        "        best = max(best, run)\n    return best\n",
                        "def longest_run(nums):\n    from collections import Counter\n"
                        "    return max(Counter(nums).values(), default=0)\n")


def rotate(rng: random.Random) -> CodeProblem:
    k = rng.randint(1, 5)
    return make_problem("lists", f"rotate_right_{k}(items)",
                        f"returns items rotated {k} places to the right (the last element moves "
                        f"to the front, {k} times); an empty list stays empty",
                        lambda items: [items[(i - k) % len(items)] for i in range(len(items))],
                        [(list(range(1, 8)),), ([1],), ([1, 2, 3],)],
                        f"def rotate_right_{k}(items):\n    if not items:\n        return []\n"
                        f"    k = {k} % len(items)\n    return items[-k:] + items[:-k] if k "
                        f"else list(items)\n",
                        f"def rotate_right_{k}(items):\n    if not items:\n        return []\n"
                        f"    k = {k} % len(items)\n    return items[k:] + items[:k]\n")


def chunk(rng: random.Random) -> CodeProblem:
    k = rng.randint(2, 5)
    return make_problem("lists", f"chunks_of_{k}(items)",
                        f"splits items into consecutive lists of {k} elements (the last one may "
                        f"be shorter) and returns the list of those lists",
                        lambda items: [items[i:i + k] for i in range(0, len(items), k)],
                        [(list(range(2 * k + 1)),), ([],)],
                        f"def chunks_of_{k}(items):\n    out = []\n    for x in items:\n"
                        f"        if not out or len(out[-1]) == {k}:\n            out.append([])\n"
                        f"        out[-1].append(x)\n    return out\n",
                        f"def chunks_of_{k}(items):\n    return [items[i:i + {k}] for i in "
                        f"range(0, len(items) - {k} + 1, {k})]\n")


DIFFICULTY_2 = (fizzbuzz, is_prime, running_sum, dedupe, count_words, capitalize_words,
                filter_even, digit_sum, gcd, fibonacci, second_largest, flatten, multiples, clip,
                count_multiples, sum_multiples_below)
DIFFICULTY_3 = (run_length_encode, balanced_brackets, is_anagram, merge_sorted, to_roman,
                to_binary, common_prefix, caesar, word_frequencies, transpose, primes_up_to,
                longest_run, rotate, chunk)
