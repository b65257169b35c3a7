%% @doc `make demo' in CI: runs the real demo ({@link hm_demo:run/0}: three peer nodes started
%% with {@link hm_cluster}, a real partition, writes on both sides, heal) and checks that it
%% converged to the expected rows (hm_demo checks the rows, running_db_nodes and no Mnesia
%% restart itself; `ok' means all held), within the demo's one-minute budget, leaving no
%% directory and no node behind.
-module(hm_demo_SUITE).
-include_lib("common_test/include/ct.hrl").

-export([all/0, suite/0, demo_converges/1]).

all() -> [demo_converges].

suite() -> [{timetrap, {minutes, 2}}].

demo_converges(_Config) ->
    T0 = erlang:monotonic_time(millisecond),
    ok = hm_demo:run(),
    Ms = erlang:monotonic_time(millisecond) - T0,
    ct:log("the demo took ~p ms", [Ms]),
    true = Ms < 60000,
    %% the demo gives hm_cluster its own directory (Mnesia directories, node logs) and
    %% deletes it
    Tmp = case os:getenv("TMPDIR") of
              false -> "/tmp";
              "" -> "/tmp";
              D -> D
          end,
    [] = filelib:wildcard(filename:join(Tmp, "hm_demo_" ++ os:getpid() ++ "_*")),
    %% its nodes (`demo<I>_<os pid>') are gone from epmd once their OS processes exited
    ok = hm_cluster:wait_until(fun() -> demo_nodes() =:= [] orelse demo_nodes() end, 10000).

demo_nodes() ->
    {ok, Names} = net_adm:names(),
    [N || {N, _Port} <- Names, lists:prefix("demo", N), lists:suffix("_" ++ os:getpid(), N)].
