#include "sim/partition.h"
