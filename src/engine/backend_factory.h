// Builds the Backend and EngineOptions a RunConfig asks for (the backend from backend, precision
// and tp; the engine options carry the per-layer toggles and faults). A configuration this build or machine
// cannot run throws UntestableError (exit 125) with the reason; it never falls back silently.
// note: make_backend is defined with the backends (src/cpu/backend_factory.cpp), not in degen_core:
// diagnostic code in degen_core takes a BackendFactory argument instead of calling it, so the core
// library never depends on a concrete backend.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/run_config.h"
#include "model/config.h"

namespace degen {

std::unique_ptr<Backend> make_backend(const RunConfig& rc, const ModelConfig& cfg);
using BackendFactory = std::function<std::unique_ptr<Backend>(const RunConfig&, const ModelConfig&)>;
EngineOptions engine_options(const RunConfig& rc);
// The CUDA devices of the ranks of backend=cuda,tp=N (the CLI's --devices); empty: N consecutive
// devices from --device.
void set_tp_devices(const std::vector<int>& devices);

}  // namespace degen
