%% @doc Silent partitions on three real nodes under full load. A real netsplit loses packets
%% without closing any connection: what the nodes send fills the connections' buffers, and
%% they notice only when the distribution's tick time runs out. The cuts of
%% {@link hm_ec_SUITE} and {@link hm_faults_SUITE} are clean (both sides see `nodedown' at
%% once). Here each node runs in a network namespace of its own ({@link hm_cluster}, option
%% `network => netns'), and a cut drops every packet between the two sides. The suite is
%% skipped where network namespaces cannot be made (it needs Linux, root and iproute2).
%%
%% The nodes run with `net_ticktime' 8 s: a cut is noticed 6 to 10 s after it starts. One
%% `pawset' ram table on the three nodes; two writers per node, unthrottled, each writing and
%% deleting (one in ten) keys of its own among 2,000, so that the last operation on each key
%% is known: once every copy is the same, each must show exactly those (nothing lost).
%% <ul>
%% <li>`silent_cut_longer_than_tick_time': node 3 cut off for 14 s. While the cut is not
%% noticed yet, every node must go on writing, also once the connections across it are full
%% (a table process that sent without `nosuspend' would wait on them, and its writers with
%% it: checked to fail so). After the heal Mnesia runs as one cluster again and every copy
%% converges.</li>
%% <li>`silent_cut_shorter_than_tick_time': node 3 cut off for 5.5 s, too short to be
%% noticed: no `nodedown', the connections stay up, and what waited in their buffers
%% arrives after the heal. Every copy converges.</li>
%% <li>`mnesia_restart_during_silent_cut': node 3 is cut off while nodes 1 and 2 write, and
%% Mnesia alone is stopped and started again there. Its start waits until the cut is
%% noticed (it cannot merge its schema with nodes that do not answer). The copy on node 3
%% comes back empty with no member to catch up from: it stays `syncing', and the writes made
%% there are kept as hints. After the heal it catches up, the hints are handed on, and every
%% copy shows the last write of every key of the three nodes.</li>
%% </ul>
-module(hm_netsplit_SUITE).
-include_lib("common_test/include/ct.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1, init_per_testcase/2,
         end_per_testcase/2]).
-export([silent_cut_longer_than_tick_time/1, silent_cut_shorter_than_tick_time/1,
         mnesia_restart_during_silent_cut/1]).
-export([writers/4, digest/1, contents/1]).

-define(TAB, sil).
-define(KEYS, 2000).
-define(TICKTIME, "8").

suite() -> [{timetrap, {minutes, 5}}].

all() -> [silent_cut_longer_than_tick_time, silent_cut_shorter_than_tick_time,
          mnesia_restart_during_silent_cut].

init_per_suite(Config) ->
    case hm_cluster:netns_available() of
        true -> Config;
        false -> {skip, "network namespaces cannot be made here (needs Linux, root and iproute2)"}
    end.

end_per_suite(_Config) -> ok.

init_per_testcase(Case, Config) ->
    Prefix = case Case of
                 silent_cut_longer_than_tick_time -> "nl";
                 silent_cut_shorter_than_tick_time -> "ns";
                 mnesia_restart_during_silent_cut -> "nm"
             end,
    C = hm_cluster:start(#{nodes => 3, dir => ?config(priv_dir, Config), prefix => Prefix,
                           modules => [?MODULE], network => netns,
                           args => ["-kernel", "net_ticktime", ?TICKTIME],
                           log_filter => {netsplit, {fun hm_cluster:netsplit_filter/2,
                                                     ["not responding"]}}}),
    Nodes = hm_cluster:nodes(C),
    {atomic, ok} = hm_cluster:call(C, 1, hypermnesia, create_table,
                                   [?TAB, [{type, pawset}, {attributes, [k, v]},
                                           {ram_copies, Nodes}]]),
    [ok = hm_cluster:call(C, I, mnesia, wait_for_tables, [[?TAB], 30000]) || I <- [1, 2, 3]],
    [{cluster, C} | Config].

end_per_testcase(_Case, Config) ->
    hm_cluster:stop(?config(cluster, Config)).

%%% ------------------------------------------------------------- cases

silent_cut_longer_than_tick_time(Config) ->
    #{cut_writes := During, disconnected := Down} = run(Config, 2000, 14000, 4000),
    %% every node wrote while the cut was silent and the connections across it full (from 2
    %% to 5 s into the cut, before any node can notice it)
    [true = N > 0 || N <- During],
    true = Down,
    {comment, io_lib:format("writes per node 2 to 5 s into the cut: ~w", [During])}.

silent_cut_shorter_than_tick_time(Config) ->
    #{cut_writes := During, disconnected := Down} = run(Config, 2000, 5500, 4000),
    [true = N > 0 || N <- During],
    {comment, io_lib:format("writes per node 2 to 5 s into the cut: ~w; connections "
                            "dropped: ~p",
                            [During, Down])}.

mnesia_restart_during_silent_cut(Config) ->
    C = ?config(cluster, Config),
    Parent = self(),
    [spawn_link(fun() ->
                        Parent ! {written, I, hm_cluster:call(C, I, ?MODULE, writers,
                                                              [?TAB, 2, 14000, 0], 80000)}
                end) || I <- [1, 2]],
    timer:sleep(2000),
    ok = hm_cluster:cut(C, [3], [1, 2]),
    timer:sleep(1000),
    ok = hm_cluster:stop_mnesia(C, 3),
    T0 = erlang:monotonic_time(millisecond),
    %% returns once the cut is noticed, and the table is loaded (empty: no other copy answers)
    ok = hm_cluster:start_mnesia(C, 3),
    Started = erlang:monotonic_time(millisecond) - T0,
    %% empty, and no member to take a state from: it catches up after the heal, and the
    %% writes made here meanwhile are kept as hints (hm_ec_hints) and handed on then
    #{status := syncing} = hm_cluster:call(C, 3, hypermnesia, info, [?TAB]),
    Own = hm_cluster:call(C, 3, ?MODULE, writers, [?TAB, 2, 2000, 0], 60000),
    ok = hm_cluster:heal(C),
    Results = [Own | [receive {written, I, R} -> R end || I <- [1, 2]]],
    check_every_copy(C, Results),
    {comment, io_lib:format("Mnesia's start on node 3 took ~p ms; ~p writes there after it",
                            [Started, maps:get(writes, Own)])}.

%% Writers on every node for Before + Cut + After ms; node 3 cut off silently after Before
%% ms, for Cut ms. Then every copy must become the same, show exactly the last operation of
%% each writer on each key, and hold nothing buffered.
run(Config, Before, Cut, After) ->
    C = ?config(cluster, Config),
    Parent = self(),
    Total = Before + Cut + After,
    T0 = erlang:monotonic_time(millisecond),
    [spawn_link(fun() ->
                        Parent ! {written, I, hm_cluster:call(C, I, ?MODULE, writers,
                                                              [?TAB, 2, Total, Before],
                                                              Total + 60000)}
                end) || I <- [1, 2, 3]],
    sleep_until(T0 + Before),
    ok = hm_cluster:cut(C, [3], [1, 2]),
    sleep_until(T0 + Before + Cut),
    %% whether node 1 noticed the cut (its connection to node 3 timed out)
    Down = not lists:member(hm_cluster:node(C, 3), hm_cluster:call(C, 1, erlang, nodes, [])),
    ok = hm_cluster:heal(C),
    Results = [receive {written, I, R} -> R end || I <- [1, 2, 3]],
    Took = check_every_copy(C, Results),
    ct:pal("writes per node ~w, of them 2 to 5 s into the cut ~w; node 1 lost its "
           "connection to node 3: ~p; every copy the same ~p ms after the writers stopped",
           [[N || #{writes := N} <- Results], [N || #{cut_writes := N} <- Results], Down,
            Took]),
    #{cut_writes => [N || #{cut_writes := N} <- Results], disconnected => Down}.

%% Every copy becomes the same within 60 s, shows each key's last operation of the
%% writers' `Results' (nothing lost, nothing else), and holds nothing buffered. Returns how
%% long the copies took to be the same.
check_every_copy(C, Results) ->
    Stopped = erlang:monotonic_time(millisecond),
    ok = hm_cluster:wait_until(
           fun() ->
                   Ds = [hm_cluster:call(C, I, ?MODULE, digest, [?TAB]) || I <- [1, 2, 3]],
                   length(lists:usort(Ds)) =:= 1 orelse Ds
           end, 60000),
    Took = erlang:monotonic_time(millisecond) - Stopped,
    Expected = maps:from_list(lists:append([maps:to_list(M) || #{last := M} <- Results])),
    [begin
         Rows = hm_cluster:call(C, I, ?MODULE, contents, [?TAB]),
         Wrong = [{K, V, maps:get(K, Rows, absent)}
                  || {K, V} <- maps:to_list(Expected), maps:get(K, Rows, absent) =/= V],
         [] = lists:sublist(Wrong, 5),
         [] = [K || K <- maps:keys(Rows), not is_map_key(K, Expected)]
     end || I <- [1, 2, 3]],
    [#{buffered_ops := 0, status := ready} = hm_cluster:call(C, I, hypermnesia, info, [?TAB])
     || I <- [1, 2, 3]],
    Took.

sleep_until(T) -> timer:sleep(max(0, T - erlang:monotonic_time(millisecond))).

%%% ------------------------------------------------------------- on the nodes

%% `N' writers for `Ms' ms, each on keys of its own (`{node(), W, K}'): a write of a fresh
%% value, or one time in ten a delete. Returns how many operations returned `ok', how many of
%% them ended from 2 to 5 s after `CutAt' ms (once the connections' buffers to the other
%% side are full, before the cut can be noticed), and each key's last operation (`absent' for
%% a delete).
writers(Tab, N, Ms, CutAt) ->
    T0 = erlang:monotonic_time(millisecond),
    Self = self(),
    Pids = [spawn_link(fun() -> Self ! {self(), write_loop(Tab, W, T0, Ms, CutAt, 0, 0, #{})}
                       end) || W <- lists:seq(1, N)],
    Rs = [receive {P, R} -> R end || P <- Pids],
    #{writes => lists:sum([W || {W, _, _} <- Rs]),
      cut_writes => lists:sum([Cw || {_, Cw, _} <- Rs]),
      last => maps:from_list(lists:append([maps:to_list(L) || {_, _, L} <- Rs]))}.

write_loop(Tab, W, T0, Ms, CutAt, Writes, CutWrites, Last) ->
    Now = erlang:monotonic_time(millisecond) - T0,
    case Now >= Ms of
        true -> {Writes, CutWrites, Last};
        false ->
            K = {node(), W, rand:uniform(?KEYS)},
            {Op, Shown} = case rand:uniform(10) of
                              1 -> {fun() -> mnesia:delete({Tab, K}) end, absent};
                              _ -> {fun() -> mnesia:write({Tab, K, Writes}) end, Writes}
                          end,
            ok = hypermnesia:async_ec(Op),
            Done = erlang:monotonic_time(millisecond) - T0,
            InCut = case Done >= CutAt + 2000 andalso Done < CutAt + 5000 of
                        true -> 1;
                        false -> 0
                    end,
            write_loop(Tab, W, T0, Ms, CutAt, Writes + 1, CutWrites + InCut, Last#{K => Shown})
    end.

%% A hash of the table's contents, the delivered vector, and what is buffered.
digest(Tab) ->
    #{delivered := D, buffered_ops := B} = hypermnesia:info(Tab),
    {erlang:phash2(lists:sort(ets:tab2list(Tab))), D, B}.

%% The table's rows as a map of key to value.
contents(Tab) -> maps:from_list([{K, V} || {_, K, V} <- ets:tab2list(Tab)]).
