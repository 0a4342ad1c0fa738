// `--report FILE.html` on `simulator` and `planner`, run as a user runs them:
// the file is written, stands alone, names the command that made it, and a
// path that cannot be written is an error naming --report. The page's content
// is tested in sim/html_report_test.cc and planner/html_report_test.cc, its
// rendering in tests/browser/check_report.sh.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "testing/cli_test_util.h"

namespace pipecast::cli_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kSimulator = PIPECAST_SIMULATOR_BIN;
const std::string kPlanner = PIPECAST_PLANNER_BIN;

class ReportCli : public ::testing::Test {
 protected:
  TempDir dir_;
};

TEST_F(ReportCli, SimulatorWritesASelfContainedPage) {
  const std::string page = dir_.File("sim.html");
  const ToolRun run =
      RunTool(dir_, kSimulator,
              "--model " + Quote(Example("toy-uniform.json")) +
                  " --stages 4 --microbatches 8 --cluster ideal --report " + Quote(page));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("bubble ratio"));  // the summary is still printed
  const std::string html = ReadText(page);
  EXPECT_THAT(html, HasSubstr("<svg class=\"timeline\""));
  EXPECT_THAT(html, HasSubstr("<polyline class=\"mem\""));
  EXPECT_THAT(html, HasSubstr("--stages 4 --microbatches 8 --cluster ideal --report"));
  EXPECT_THAT(html, Not(HasSubstr("<script")));
}

TEST_F(ReportCli, PlannerWritesTheTradeOffAndTheChosenTimeline) {
  const std::string page = dir_.File("plan.html");
  const ToolRun run =
      RunTool(dir_, kPlanner,
              "--model " + Quote(Example("gpt-7b.json")) + " --gpus 8 --report " + Quote(page));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("wrote the HTML report to"));
  const std::string html = ReadText(page);
  EXPECT_THAT(html, HasSubstr("<svg class=\"sweep-chart\""));
  EXPECT_THAT(html, HasSubstr("<svg class=\"timeline\""));
  EXPECT_THAT(html, HasSubstr("<tr class=\"candidate chosen\""));
}

TEST_F(ReportCli, PlannerWritesThePageWhenNothingFits) {
  const std::string page = dir_.File("none.html");
  const ToolRun run =
      RunTool(dir_, kPlanner,
              "--model " + Quote(Example("llama-70b.json")) + " --gpus 8 --report " + Quote(page));
  EXPECT_EQ(run.exit_code, 4) << run.err;
  const std::string html = ReadText(page);
  EXPECT_THAT(html, HasSubstr("No configuration fits"));
  EXPECT_THAT(html, HasSubstr("class=\"reject-group\""));
}

TEST_F(ReportCli, AnUnwritablePathIsAnErrorNamingTheFlag) {
  const std::string page = dir_.File("missing-folder/sim.html");
  const ToolRun run = RunTool(dir_, kSimulator,
                              "--model " + Quote(Example("toy-uniform.json")) +
                                  " --stages 2 --cluster ideal --report " + Quote(page));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("--report"));
  EXPECT_FALSE(Exists(page));
}

}  // namespace
}  // namespace pipecast::cli_test
