#include "sim/trace.h"
