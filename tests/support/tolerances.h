// The tests read the project's one tolerance table (alpha/check/tolerances.h).
#pragma once
#include "alpha/check/tolerances.h"

namespace alpha::test {
using check::Tolerance;
using check::tolerance;
}  // namespace alpha::test
