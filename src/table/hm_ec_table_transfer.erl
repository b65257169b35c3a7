%% @doc State transfer for an EC table copy that has no state (new, or restarted without
%% its disc state): a ready member sends a snapshot of everything reads show, its unstable
%% metadata and log, and the copy installs the first one it gets. A copy without state
%% must not take writes (it has no causal context: a delete would remove records it never
%% saw), so it refuses them until then. Part of the per-table core ({@link hm_ec_table}); pure.
%%
%% Invariant: a copy starts from nothing only when every other member says it holds nothing
%% from anyone else (the members of a brand-new table).
-module(hm_ec_table_transfer).
-include("hm_ec_table.hrl").

-export([snapshot/1, answers/2, empty_snapshot/0, install/2]).

%% a copy that asks for a snapshot asks every member at every tick until it has installed
%% one; after this many ticks without a request from it, its next starts a new round
-define(ASK_GAP_TICKS, 8).
%% of the ready members that could answer, the first in node order answers at once, each
%% next one this many ticks later if the copy still asks, and a tick more per
%% ?ROWS_PER_TICK rows (a large table's snapshot takes seconds to build, send and install)
-define(ANSWER_STAGGER_TICKS, 8).

%% @doc What a member that is caught up sends to one that is not: everything reads show, the
%% metadata of unstable keys, the delivered vector they reflect, the logged operations not yet
%% stable (so the receiver can pass them on should their origin die) and the unstable clears.
%% A member still syncing that holds nothing from anyone else says so (a syncing copy makes
%% no operation of its own: it refuses writes until it has installed a state).
-spec snapshot(#t{}) -> {snapshot, map()} | {snapshot_empty} | {snapshot_none}.
snapshot(#t{status = ready, store = St, tcsb = B, clears = Cs}) ->
    {snapshot, #{rows => hm_ec_store:rows(St), meta => hm_ec_store:meta_rows(St),
                 delivered => hm_tcsb:delivered(B), log => hm_tcsb:log_msgs(B), clears => Cs}};
snapshot(#t{tcsb = B}) ->
    case maps:keys(hm_tcsb:delivered(B)) -- [hm_tcsb:self(B)] of
        [] -> {snapshot_empty};
        _ -> {snapshot_none}
    end.

%% @doc Whether this ready copy answers member `From''s request for a snapshot now. Every
%% ready member is asked, and building a large table's snapshot (?ROWS_PER_TICK rows or
%% more) holds a copy's process, and its writers, for a second or more: so of the ready
%% members reachable and heard from lately, the first in node order (but `From') answers at
%% once, and each next one only when `From' still asks some ticks later (the first cannot
%% reach it, or its snapshot was lost). A smaller table's snapshot is sent by every one.
-spec answers(node(), #t{}) -> {boolean(), #t{}}.
answers(From, T = #t{ticks = N, snapshot_asks = Asks, tcsb = B, store = St, up = Up}) ->
    First = case Asks of
                #{From := {F, Last}} when N - Last =< ?ASK_GAP_TICKS -> F;
                _ -> N
            end,
    Self = ?NODE_OF(B),
    %% ready, as far as this copy knows: reachable, running, and holding something
    Peers = [X || X <- hm_tcsb:members(B), X =/= From, X < Self, lists:member(X, Up),
                  hm_tcsb:acked_within(X, ?HEARD_TICKS, B),
                  map_size(hm_tcsb:reported(X, B)) > 0],
    Wait = case hm_ec_store:size(St) of
               %% a small table's snapshot costs little: every ready member answers, and
               %% one lost on the way costs nothing
               Rows when Rows < ?ROWS_PER_TICK -> 0;
               Rows -> length(Peers) * (?ANSWER_STAGGER_TICKS + Rows div ?ROWS_PER_TICK)
           end,
    {N - First >= Wait, T#t{snapshot_asks = Asks#{From => {First, N}}}}.

%% @doc The state of a table that holds nothing: what a copy installs when every other
%% member says it holds nothing from anyone else.
-spec empty_snapshot() -> map().
empty_snapshot() -> #{rows => [], meta => [], delivered => #{}, log => [], clears => []}.

%% @doc Install a member's state; the messages that arrived meanwhile are returned, in the
%% order they arrived, for the caller to deliver.
-spec install(map(), #t{}) -> {#t{}, [hm_ec_table:effect()], [hm_tcsb:message()]}.
install(#{rows := Rows, meta := MetaRows, delivered := V, log := Log, clears := Clears},
        T = #t{tab = Tab, tcsb = Old, status = {syncing, Raw, _}, store = St0,
               tcsb_opts = TOpts, events = Ev}) ->
    Cleared = hm_ec_table_restore:with_format(hm_ec_store:log_clear(St0)),
    St1 = lists:foldl(fun hm_ec_store:delete/2, Cleared, hm_ec_store:all_keys(St0)),
    St2 = lists:foldl(fun hm_ec_store:meta_del/2, St1, hm_ec_store:meta_keys(St1)),
    St3 = hm_ec_store:write_all(Rows, St2),
    St4 = lists:foldl(fun({K, KS}, Acc) -> hm_ec_store:meta_put(K, KS, Acc) end, St3, MetaRows),
    B0 = hm_tcsb:restore_log(Log, hm_tcsb:new(hm_tcsb:self(Old), hm_tcsb:members(Old), V,
                                              TOpts)),
    %% the member may have caught up by state: its unstable keys may hold entries of
    %% operations its log (now this copy's) lacks, folded once all of `V' is stable
    %% (a state being sent in parts from the state replaced goes no further: its receiver
    %% asks again)
    Installed = hm_ec_table_flow:flow_changed(T#t{store = St4, tcsb = B0, status = ready,
                                                  clears = Clears, stable_seen = undefined,
                                                  fold_after = V, streams = #{}}),
    T0 = hm_ec_table_apply:persist_clears(Installed, undefined),
    T1 = lists:foldl(fun(M, Acc) -> hm_ec_table_apply:persist(Acc, M, V) end, T0, Log),
    Effs = [{info, "hypermnesia: ~p caught up (~p rows)", [Tab, length(Rows)]}
            | [{event, {installed, V}} || Ev]],
    {T1, Effs, lists:reverse(Raw)}.
