#include "sim/schedule_text.h"
