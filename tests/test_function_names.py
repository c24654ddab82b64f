"""Function names shortened as ``perf report`` shows C++ code (no argument
list; here also no template arguments), and fitted into a width."""

import pytest
from hypothesis import given, strategies as st

from phasewatch.live.function_names import fit_name, short_name
from phasewatch.report.tables import top_functions_cell

FOLD = ("workload::detail::Accumulator<unsigned long, double, std::less<unsigned long> >::fold("
        "std::vector<std::pair<unsigned long, double>, std::allocator<std::pair<unsigned long, "
        "double> > > const&, unsigned long) [clone .isra.0]")


@pytest.mark.parametrize("name, short", [
    (FOLD, "workload::detail::Accumulator<>::fold"),
    ("std::vector<int, std::allocator<int> >::push_back(int const&)", "std::vector<>::push_back"),
    ("std::ostream& std::operator<< <std::char_traits<char> >(std::ostream&, char const*)",
     "std::ostream& std::operator<< <>"),
    ("a::b<c::d>::operator->() const", "a::b<>::operator->"),
    ("main::{lambda(int)#1}::operator()(int) const", "main::{lambda(int)#1}::operator()"),
    ("(anonymous namespace)::step(int)", "(anonymous namespace)::step"),
    ("region_a", "region_a"),
    ("[k] read_zero", "[k] read_zero"),
    ("[python3.11]", "[python3.11]"),
    ("JS:*phaseMath", "JS:*phaseMath"),
    ("libz.so.1+0x2f10", "libz.so.1+0x2f10"),
])
def test_short_name_drops_arguments_and_template_arguments(name, short):
    assert short_name(name) == short


def test_fit_name_drops_leading_scopes_then_cuts():
    assert fit_name(FOLD, 40) == "workload::detail::Accumulator<>::fold"
    assert fit_name(FOLD, 30) == "…::detail::Accumulator<>::fold"
    assert fit_name(FOLD, 24) == "…::Accumulator<>::fold"
    assert fit_name(FOLD, 10) == "…::fold"
    assert fit_name("a_very_long_c_function_name", 10) == "a_very_lo…"


def test_a_cell_keeps_every_function_where_they_fit():
    top = [("f1", 0.91), ("[vdso]", 0.06), ("clock", 0.023)]
    assert top_functions_cell(top, 40) == "f1 91%, [vdso] 6%, clock 2%"
    assert top_functions_cell(top, 12) == "f1 91%,\n[vdso] 6%"
    assert top_functions_cell(top) == "f1 91%, [vdso] 6%, clock 2%"


def test_a_cell_adds_up_the_shares_of_one_short_name():
    top = [(FOLD, 0.6), (FOLD.replace(".isra.0", ".cold"), 0.3), ("main", 0.1)]
    assert top_functions_cell(top) == "workload::detail::Accumulator<>::fold 90%, main 10%"


@given(st.lists(st.tuples(st.text(st.characters(min_codepoint=33, max_codepoint=126),
                                  min_size=1, max_size=300),
                          st.floats(0.005, 1.0)), min_size=1, max_size=3),
       st.integers(20, 200))
def test_a_cell_is_at_most_two_lines_of_its_width(top, width):
    cell = top_functions_cell(top, width)
    lines = cell.split("\n")
    assert len(lines) <= 2 and all(len(line) <= width for line in lines), (cell, width)
