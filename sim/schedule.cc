#include "sim/schedule.h"
