// Umbrella header: the whole public API.
#pragma once
#include "ding/device.h"
#include "ding/dtype.h"
#include "ding/error.h"
#include "ding/profile.h"
#include "ding/tensor.h"
#include "ding/version.h"
#include "ding/workspace.h"
#include "ding/ops/ops.h"
