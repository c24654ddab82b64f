"""Function names shortened as ``perf report`` shows C++ code (no argument
list; here also no template arguments), and fitted into a width."""

import pytest

from phasewatch.live.function_names import fit_name, short_name

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
