#include "sim/report.h"
