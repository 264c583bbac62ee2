// Number formats the comparison's reasons and notes share.
#pragma once
#include <string>

namespace degen::compare_format {

// Scientific with three significant digits ("1.23e-04"); "0", "nan", "inf", "-inf" as such.
std::string sci(double v);

}  // namespace degen::compare_format
