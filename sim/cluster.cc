#include "sim/cluster.h"
