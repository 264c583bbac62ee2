#include "engine/backend_factory.h"

namespace degen {

EngineOptions engine_options(const RunConfig& rc) {
  EngineOptions o;
  o.gdn = rc.gdn.base;
  o.run = rc;
  return o;
}

}  // namespace degen
