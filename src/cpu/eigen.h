// The one way degenbisect includes Eigen. Eigen's own OpenMP parallelism is switched off: the CPU
// backend splits work itself by fixed tiles (results independent of the thread count), and an
// Eigen GEMM that forks inside an op would make results depend on the thread count.
// note: every translation unit must include Eigen through this header, so that all template
// instantiations agree (one definition rule).
#pragma once
#ifndef EIGEN_DONT_PARALLELIZE
#define EIGEN_DONT_PARALLELIZE
#endif
#include <Eigen/Core>
