// Every op, for library users: #include <ding/ops/ops.h> (or <ding/ding.h>).
#pragma once
#include "ding/ops/dispatch.h"
#include "ding/ops/kernels.h"
