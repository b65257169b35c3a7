%% @doc State transfer for an EC table copy that has no state (new, or restarted without
%% its disc state): a ready member sends a snapshot of everything reads show, its unstable
%% metadata and log, and the copy installs the first one it gets. A copy without state
%% must not take writes (it has no causal context: a delete would remove records it never
%% saw), so it refuses them until then. Part of the per-table core ({@link hm_ec_table}); pure.
%%
%% A large `pawset' table's snapshot goes in parts (as a state to join does, {@link
%% hm_ec_table_stream}), each read by the sender as it goes ({@link snapshot_keys/1}), and
%% written here as it comes, in order, so that neither end holds the whole table at once
%% beyond its rows: the first part clears what the copy held, and each part holds its share
%% of the keys, read when it goes, and may hold again keys that changed on the sender since
%% the transfer began (the last part holds every one not sent again yet); its keys replace
%% what the copy holds of them. So each key ends as the last part that holds it says, and
%% the last part carries the delivered vector, the log and the clears every key is then as:
%% with it the copy is installed. Operations that members send meanwhile are not kept (for
%% as long as a large transfer takes under load they would pile up): once the copy
%% acknowledges what it installed, they send again what it lacks, as after any loss. Until then
%% reads here show the rows written so far. A transfer cut off is given up after a while
%% (as a state's is) and the copy asks again; the next clears what the last one wrote.
%%
%% Invariant: a copy starts from nothing only when every other member says it holds nothing
%% from anyone else (the members of a brand-new table).
-module(hm_ec_table_transfer).
-include("hm_ec_table.hrl").

-export([snapshot/1, snapshot_keys/1, key_rows/2, tail/1, answers/2, empty_snapshot/0,
         install/2, begin_parts/3, part/3, gone/3, tick/1, is_receiving/1]).
-export_type([incoming/0]).

%% a snapshot in parts being received: its sender, id, the next part to write, how many
%% there are, the tick of the last part, and the parts here ahead of the next one
-type incoming() :: {snapshot, node(), term(), pos_integer(), pos_integer(),
                     non_neg_integer(), #{pos_integer() => binary()}}.

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
snapshot(T = #t{status = ready, store = St}) ->
    {snapshot, (tail(T))#{rows => hm_ec_store:rows(St), meta => hm_ec_store:meta_rows(St)}};
snapshot(#t{tcsb = B}) ->
    case maps:keys(hm_tcsb:delivered(B)) -- [hm_tcsb:self(B)] of
        [] -> {snapshot_empty};
        _ -> {snapshot_none}
    end.

%% @doc Whether this copy sends its snapshot in parts, and then every key it holds rows or
%% metadata for: a ready `ram_copies' copy that sends its states in parts ({@link
%% hm_ec_table_stream:in_parts/1}), reads them as they go (option `parts_late') and holds
%% more keys than a part. A disc copy sends its snapshot whole: what it sends is on disc
%% first, at one moment.
-spec snapshot_keys(#t{}) -> {parts, [term()]} | whole.
snapshot_keys(T = #t{status = ready, disc = false, crdt = none, parts_late = true,
                     part_keys = P, store = St}) when is_integer(P) ->
    case hm_ec_table_stream:in_parts(T) andalso hm_ec_store:size(St) > P of
        true ->
            Keys = hm_ec_store:all_keys(St),
            %% keys deleted whose metadata is not stable yet
            Gone = [K || K <- hm_ec_store:meta_keys(St), hm_ec_store:read(K, St) =:= []],
            {parts, Gone ++ Keys};
        false -> whole
    end;
snapshot_keys(_) -> whole.

%% @doc Keys `Keys' of a snapshot in parts: `{KeyRows, MetaRows}', each key's rows (`[]' for
%% a key deleted) and the metadata of those that have some.
-spec key_rows([term()], #t{}) -> {[{term(), [tuple()]}], [{term(), hm_ec_key:key_state()}]}.
key_rows(Keys, #t{store = St}) ->
    lists:foldr(fun(K, {KR, MR}) ->
                        Meta = case hm_ec_store:meta_get(K, St) of
                                   {ok, KS} -> [{K, KS} | MR];
                                   none -> MR
                               end,
                        {[{K, hm_ec_store:read(K, St)} | KR], Meta}
                end, {[], []}, Keys).

%% @doc What the last part of a snapshot in parts carries beside its keys: what every key of
%% it is as, as a whole snapshot has it. And, when this copy can tell the keys a member may
%% lack (hm_ec_table_catch_up:merge_state/2), what it folded: the copy that installs it can
%% then tell them too, from the same metadata and log.
-spec tail(#t{}) -> #{delivered := hm_vv:vv(), log := list(), clears := list(),
                      folded => hm_vv:vv()}.
tail(#t{tcsb = B, clears = Cs, unlisted = Unlisted, given_up_keys = GivenUp, folded = F}) ->
    Tail = #{delivered => hm_tcsb:delivered(B), log => hm_tcsb:log_msgs(B), clears => Cs},
    %% the keys given up go with their vector, which stays here
    case not Unlisted andalso GivenUp =:= #{} of
        true -> Tail#{folded => F};
        false -> Tail
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
install(Snap = #{rows := Rows, meta := MetaRows}, T0) ->
    T = #t{store = St0} = clear(T0),
    St1 = hm_ec_store:write_all(Rows, St0),
    St = lists:foldl(fun({K, KS}, Acc) -> hm_ec_store:meta_put(K, KS, Acc) end, St1, MetaRows),
    installed(Snap, length(Rows), T#t{store = St}).

%% The copy's store emptied (a snapshot replaces what it held).
clear(T = #t{store = St0}) ->
    Cleared = hm_ec_table_restore:with_format(hm_ec_store:log_clear(St0)),
    St1 = lists:foldl(fun hm_ec_store:delete/2, Cleared, hm_ec_store:all_keys(St0)),
    T#t{store = lists:foldl(fun hm_ec_store:meta_del/2, St1, hm_ec_store:meta_keys(St1))}.

%% The rows and metadata of a snapshot are in the store: its vector, log and clears too.
installed(Tail = #{delivered := V, log := Log, clears := Clears}, Count,
          T = #t{tab = Tab, tcsb = Old, status = {syncing, Raw, _}, store = St4,
                 tcsb_opts = TOpts, events = Ev}) ->
    B0 = hm_tcsb:restore_log(Log, hm_tcsb:new(hm_tcsb:self(Old), hm_tcsb:members(Old), V,
                                              TOpts)),
    %% the member may have caught up by state: its unstable keys may hold entries of
    %% operations its log (now this copy's) lacks, folded once all of `V' is stable
    %% (a state being sent in parts from the state replaced goes no further: its receiver
    %% asks again); with what its sender folded, this copy tells the keys a member may lack
    %% as the sender would (tail/1)
    Installed = hm_ec_table_flow:flow_changed(
                  T#t{store = St4, tcsb = B0, status = ready, clears = Clears,
                      stable_seen = undefined, fold_after = V, streams = #{}, incoming = none,
                      unlisted = not is_map_key(folded, Tail),
                      folded = maps:get(folded, Tail, T#t.folded), given_up_keys = #{},
                      pushed = #{}}),
    T0 = hm_ec_table_apply:persist_clears(Installed, undefined),
    T1 = lists:foldl(fun(M, Acc) -> hm_ec_table_apply:persist(Acc, M, V) end, T0, Log),
    Effs = [{info, "hypermnesia: ~p caught up (~p rows)", [Tab, Count]}
            | [{event, {installed, V}} || Ev]],
    {T1, Effs, lists:reverse(Raw)}.

%%% ---------------------------------------------------------- a snapshot in parts

%% @doc The first part of a snapshot in parts from `From' ({@link
%% hm_ec_table_stream:send_snapshot/3}): what the copy held is cleared and the part's keys
%% written, the rest awaited. While another member's transfer goes on (a part from it within
%% ?STALL_TICKS), the sender is told this copy does not take it.
-spec begin_parts(node(), map(), #t{}) -> {#t{}, effects()}.
begin_parts(From, #{parts := {Id, Count}, rows := KeyRows, meta := Meta},
            T = #t{incoming = In, ticks = N}) ->
    case In of
        {snapshot, Src, _, _, _, At, _} when Src =/= From, N - At < ?STALL_TICKS ->
            {T, [{send, From, {merge_part_gone, Id}}]};
        _ ->
            T1 = write(KeyRows, Meta, clear(T)),
            {T1#t{incoming = {snapshot, From, Id, 2, Count, N, #{}}},
             [{send, From, {merge_part_ack, Id, 1}}]}
    end.

%% @doc Part `I' of snapshot `Id' from `From': kept when within ?WINDOW of the next one to
%% write; the parts here from the next one on are written in order, and with the last the
%% copy is installed: the messages that arrived meanwhile are returned (as {@link install/2}
%% returns them) for the caller to deliver.
-spec part(node(), {term(), pos_integer(), term()}, #t{}) ->
          {#t{}, effects()} | {installed, #t{}, effects(), [hm_tcsb:message()]}.
part(From, {Id, I, Bin}, T = #t{incoming = {snapshot, From, Id, Next, Count, _, Here}})
  when is_binary(Bin), I >= Next, I =< Next + ?WINDOW, I =< Count ->
    write_ready(From, Id, Next, Count, Here#{I => Bin}, T);
part(_, _, T) -> {T, []}.

write_ready(From, Id, Next, Count, Here, T = #t{tab = Tab, ticks = N}) ->
    case Here of
        #{Next := Bin} ->
            case {Next =:= Count, decode(Bin)} of
                {false, {KeyRows, Meta}} ->
                    write_ready(From, Id, Next + 1, Count, maps:remove(Next, Here),
                                replace(KeyRows, Meta, T));
                {true, {KeyRows, Meta, Tail}} ->
                    {T1, Effs, Pending} =
                        installed(Tail, hm_ec_store:size(T#t.store), replace(KeyRows, Meta, T)),
                    {installed, T1, [{send, From, {merge_part_ack, Id, Count}} | Effs],
                     Pending};
                _ ->
                    {T#t{incoming = none},
                     [{send, From, {merge_part_gone, Id}},
                      {drop, {bad_message, Tab, From, {merge_part, Id, Next}}}]}
            end;
        _ ->
            {snapshot, _, _, Was, _, _, _} = T#t.incoming,
            {T#t{incoming = {snapshot, From, Id, Next, Count, N, Here}},
             [{send, From, {merge_part_ack, Id, Next - 1}} || Next > Was]}
    end.

%% A part, decoded, when it is of a part's shape (the last one with what its keys are as).
decode(Bin) ->
    try binary_to_term(Bin) of
        Part = {KeyRows, Meta} ->
            case hm_ec_wire:is_merge_part(KeyRows, Meta) of
                true -> Part;
                false -> bad
            end;
        Part = {KeyRows, Meta, Tail} ->
            case hm_ec_wire:is_snapshot_part(KeyRows, Meta, Tail) of
                true -> Part;
                false -> bad
            end;
        _ -> bad
    catch
        error:badarg -> bad
    end.

%% Write a part's keys: their rows, and the metadata of those that have some.
write(KeyRows, Meta, T = #t{store = St0}) ->
    St1 = hm_ec_store:write_all(lists:append([Rows || {_, Rows} <- KeyRows]), St0),
    T#t{store = lists:foldl(fun({K, KS}, Acc) -> hm_ec_store:meta_put(K, KS, Acc) end, St1,
                            Meta)}.

%% A part's keys replace what earlier parts wrote of them (rows and metadata).
replace(KeyRows, Meta, T = #t{store = St0}) ->
    St = lists:foldl(fun({K, _}, Acc) -> hm_ec_store:meta_del(K, hm_ec_store:delete(K, Acc)) end,
                     St0, KeyRows),
    write(KeyRows, Meta, T#t{store = St}).

%% @doc The sender of snapshot `Id' no longer sends it (it forgot it, or restarted): given
%% up here; the copy asks for a snapshot again.
-spec gone(node(), term(), #t{}) -> {#t{}, effects()}.
gone(From, Id, T = #t{incoming = {snapshot, From, Id, _, _, _, _}}) ->
    {T#t{incoming = none}, []};
gone(_, _, T) -> {T, []}.

%% @doc At a tick: a receiver without a part for ?STALL_TICKS acknowledges what it has
%% written again (every ?STALL_TICKS), and gives the transfer up after ?ABANDON_TICKS.
-spec tick(#t{}) -> {#t{}, effects()}.
tick(T = #t{incoming = {snapshot, _, _, _, _, At, _}, ticks = N}) when N - At >= ?ABANDON_TICKS ->
    {T#t{incoming = none}, []};
tick(T = #t{incoming = {snapshot, From, Id, Next, _, At, _}, ticks = N})
  when N - At >= ?STALL_TICKS, (N - At) rem ?STALL_TICKS =:= 0 ->
    {T, [{send, From, {merge_part_ack, Id, Next - 1}}]};
tick(T) -> {T, []}.

%% @doc Whether this copy is receiving a snapshot in parts that has not stalled: it asks
%% no member for another meanwhile.
-spec is_receiving(#t{}) -> boolean().
is_receiving(#t{incoming = {snapshot, _, _, _, _, At, _}, ticks = N}) -> N - At < ?STALL_TICKS;
is_receiving(_) -> false.
