#include "sim/formats.h"
