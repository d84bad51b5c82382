// Private: every built-in plugin folder's header (plugin_util.h explains the layout). registry.cc,
// the scheduler and tests include this one.
#pragma once

#include "plugins/accepted/accepted.h"
#include "plugins/admitter/admitter.h"
#include "plugins/capabilities.h"
#include "plugins/datalayer/datalayer.h"
#include "plugins/filter/filter.h"
#include "plugins/flowcontrol/flowcontrol.h"
#include "plugins/latency/latency.h"
#include "plugins/locality/locality.h"
#include "plugins/parser/parser.h"
#include "plugins/picker/picker.h"
#include "plugins/plugin_util.h"
#include "plugins/producer/producer.h"
#include "plugins/profile/profile.h"
#include "plugins/response/response.h"
#include "plugins/saturation/saturation.h"
#include "plugins/screener/screener.h"
#include "plugins/scorer/scorer.h"
