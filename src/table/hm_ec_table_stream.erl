%% @doc A state in parts: a copy that catches up by state ({@link hm_ec_table_catch_up}) from
%% a large table receives it a part at a time and joins it a part at a time, between its
%% other work, instead of in one step that holds its writers and its memory for the whole
%% table. Part of the per-table core ({@link hm_ec_table}); pure.
%%
%% The sender builds the state as before, at one moment, so that every key of it is as the
%% sender's delivered vector `VP' says, listing its keys (`{left_out, ...}'). When it holds
%% more keys than the option `part_keys', it cuts it into parts of that many keys, each
%% encoded once (a binary outside the process's heap) and shared by every member it goes
%% to. The first part goes as the state itself (`{merge, State}' with `parts => {Id,
%% Count}'), so that whether a copy takes it is decided as for any state; each next one
%% (`{merge_part, Id, I, Part}') once the receiver has acknowledged receiving the one
%% ?WINDOW before it (`{merge_part_ack, Id, I}': every part up to `I' is here). A transfer
%% goes at the pace the receiver takes it.
%%
%% The receiver keeps the parts as they come, encoded, and joins nothing until it has them
%% all: a transfer cut off in the middle (the sender crashed, the network is cut again)
%% leaves its state as it was. A receiver that has had no part for ?STALL_TICKS
%% acknowledges what it has again, and the sender sends again what follows; after
%% ?ABANDON_TICKS the receiver gives the transfer up (and asks for a state again), and the
%% sender forgets a transfer not acknowledged for as long.
%%
%% With every part here, it joins them one per step (the effect `{continue, ...}': its
%% writers and members' operations go between two parts), each part's keys as a whole
%% state's keys are joined, and counts `VP' as delivered with the last: until then the
%% sender's later operations wait in the causal buffer. An operation that `VP' holds and that
%% is delivered meanwhile, on a key already joined, is already in that key's state: its
%% effect is skipped ({@link skips/3}). Meanwhile the copy builds no state and no snapshot
%% for others (those keys are ahead of its delivered vector: a copy that took them would
%% hold their operations twice) and joins no other state. Only `pawset' tables, whose
%% states carry no unstable clear; others send their states as one message.
-module(hm_ec_table_stream).
-include("hm_ec_table.hrl").

-export([send_state/3, in_parts/1, acked/4, begin_parts/5, part/3, gone/3, join_next/2,
         tick/1, skips/3, is_ahead/1, receiving_other/2, not_taken/3]).
-export_type([stream/0, incoming/0]).

%% parts sent ahead of the last one the receiver acknowledged
-define(WINDOW, 4).
%% a receiver without a part for this many ticks acknowledges what it has again
-define(STALL_TICKS, 8).
%% ... and gives the transfer up after this many; the sender forgets one not acknowledged
%% for as long
-define(ABANDON_TICKS, 48).

%% a transfer being sent: its id, the parts after the first (encoded), the last part the
%% receiver acknowledged, the last one sent, the tick of the last acknowledgement
-type stream() :: {term(), tuple(), pos_integer(), pos_integer(), non_neg_integer()}.
%% the transfer being received (its sender, id, the next part awaited, how many there are,
%% the sender's delivered vector, the tick of the last part, the parts here), or being joined
%% (the next part to join instead of the tick)
-type incoming() :: none
                  | {receiving, node(), term(), pos_integer(), pos_integer(), hm_vv:vv(),
                     non_neg_integer(), #{pos_integer() => binary()}}
                  | {joining, node(), term(), pos_integer(), pos_integer(), hm_vv:vv(),
                     #{pos_integer() => binary()}}.

%%% ---------------------------------------------------------------- the sender

%% @doc Send `State' ({@link hm_ec_table_catch_up:merge_state/2}) to the members `Ms'. A
%% copy that sends its states in parts ({@link in_parts/1}) lists only the keys in the state
%% it builds (`{left_out, Folded, {keys, Keys}}'): their rows and metadata are read here, in
%% parts when there are more keys than a part holds, otherwise into one message.
-spec send_state([node()], {merge, map()} | {merge_none}, #t{}) -> {#t{}, effects()}.
send_state(Ms, {merge, State = #{rows := {left_out, Folded, {keys, Keys}}}},
           T = #t{part_keys = P}) ->
    case chunks(Keys, P) of
        [_] ->
            {KeyRows, Meta} = hm_ec_table_catch_up:key_rows(Keys, T),
            Msg = {merge, State#{rows := {left_out, Folded, KeyRows}, meta := Meta}},
            {T, [{send, M, Msg} || M <- Ms]};
        [Chunk1 | Rest] ->
            %% the rows as they are now, read a part at a time (each encoded at once: the
            %% process's heap never holds the whole state)
            {KR1, MR1} = hm_ec_table_catch_up:key_rows(Chunk1, T),
            Bins = list_to_tuple([term_to_binary(hm_ec_table_catch_up:key_rows(C, T))
                                  || C <- Rest]),
            Count = tuple_size(Bins) + 1,
            lists:foldl(
              fun(M, {Tx = #t{streams = S, tcsb = B, ticks = N}, Effs}) ->
                      Id = {hm_tcsb:self(B), N, M},
                      First = {merge, State#{rows := {left_out, Folded, KR1}, meta := MR1,
                                             parts => {Id, Count}}},
                      {Tx#t{streams = S#{M => {Id, Bins, 1, 1, N}}},
                       Effs ++ [{send, M, First}]}
              end, {T, []}, Ms)
    end;
send_state(Ms, Msg, T) -> {T, [{send, M, Msg} || M <- Ms]}.

%% @doc Whether this copy sends its states in parts when they are large enough: a `pawset'
%% table with the option `part_keys' set.
-spec in_parts(#t{}) -> boolean().
in_parts(#t{part_keys = P, type = Type}) -> is_integer(P) andalso Type =:= pawset.

%% `L' cut into lists of `P' elements, in order (the last may hold fewer; `[[]]' for none).
chunks(L, P) -> chunks(L, P, P, [], []).

chunks([], _, _, [], []) -> [[]];
chunks([], _, _, [], Acc) -> lists:reverse(Acc);
chunks([], _, _, C, Acc) -> lists:reverse(Acc, [lists:reverse(C)]);
chunks(L, P, 0, C, Acc) -> chunks(L, P, P, [], [lists:reverse(C) | Acc]);
chunks([X | L], P, Left, C, Acc) -> chunks(L, P, Left - 1, [X | C], Acc).

%% @doc Member `M' has every part of transfer `Id' up to `I': the parts up to ?WINDOW past it
%% go (again from `I' on when it said `I' before: what followed was lost); the last one ends
%% the transfer here.
-spec acked(node(), term(), pos_integer(), #t{}) -> {#t{}, effects()}.
acked(M, Id, I, T = #t{streams = S, ticks = N}) ->
    case S of
        #{M := {Id, Bins, Acked, Sent, _}} ->
            Count = tuple_size(Bins) + 1,
            if
                I >= Count -> {T#t{streams = maps:remove(M, S)}, []};
                I < Acked -> {T, []};                % an old one
                true ->
                    From = case I =:= Acked of
                               true -> I + 1;
                               false -> Sent + 1
                           end,
                    To = min(Count, I + ?WINDOW),
                    {T#t{streams = S#{M := {Id, Bins, I, max(Sent, To), N}}},
                     [{send, M, {merge_part, Id, J, element(J - 1, Bins)}}
                      || J <- lists:seq(From, To)]}
            end;
        _ -> {T, [{send, M, {merge_part_gone, Id}}]}
    end.

%%% ---------------------------------------------------------------- the receiver

%% @doc The first part of a transfer of `Count' parts from `From', its keys `{KeyRows, Meta}',
%% taken (as a state is, {@link hm_ec_table_catch_up:merge_asked/4} and the others): the
%% rest is awaited.
-spec begin_parts(node(), {term(), pos_integer()}, hm_vv:vv(), {list(), list()}, #t{}) ->
          {#t{}, effects()}.
begin_parts(From, {Id, Count}, VP, First, T = #t{ticks = N}) ->
    {T#t{incoming = {receiving, From, Id, 2, Count, VP, N, #{1 => term_to_binary(First)}}},
     [{send, From, {merge_part_ack, Id, 1}}]}.

%% @doc Part `I' of transfer `Id' from `From': kept when it is the next one or within
%% ?WINDOW after it; once every part is here, the first is joined.
-spec part(node(), {term(), pos_integer(), term()}, #t{}) -> {#t{}, effects()}.
part(From, {Id, I, Bin}, T = #t{incoming = {receiving, From, Id, Next, Count, _, _, _}})
  when I >= Next, I =< Next + ?WINDOW, I =< Count ->
    case is_part(Bin) of
        true -> keep_part(From, {Id, I, Bin}, T);
        false -> {T, [{drop, {bad_message, T#t.tab, From, {merge_part, Id, I}}}]}
    end;
part(_, _, T) -> {T, []}.

%% Whether a part holds keys as a state does (checked once, on arrival: one joined later is
%% known good, and a copy half through joining a state cannot stop).
is_part(Bin) when is_binary(Bin) ->
    try binary_to_term(Bin) of
        {KeyRows, Meta} -> hm_ec_wire:is_merge_part(KeyRows, Meta);
        _ -> false
    catch
        error:badarg -> false
    end;
is_part(_) -> false.

keep_part(From, {Id, I, Bin}, T = #t{incoming = {receiving, From, Id, Next, Count, VP, _, Parts}}) ->
    Parts1 = Parts#{I => Bin},
    Next1 = next_missing(Next, Parts1),
    Ack = [{send, From, {merge_part_ack, Id, Next1 - 1}} || Next1 > Next],
    case Next1 > Count of
        true ->
            {T#t{incoming = {joining, From, Id, 1, Count, VP, Parts1}},
             Ack ++ [{continue, {join_part, Id}}]};
        false ->
            {T#t{incoming = {receiving, From, Id, Next1, Count, VP, T#t.ticks, Parts1}}, Ack}
    end.

next_missing(I, Parts) when is_map_key(I, Parts) -> next_missing(I + 1, Parts);
next_missing(I, _) -> I.

%% @doc The other end no longer wants transfer `Id': a sender that forgot it (or restarted),
%% and this copy gives it up while it has not every part (and asks for a state again when
%% it still lacks one); or a receiver that did not take it ({@link not_taken/3}), and this
%% copy sends no more of it.
-spec gone(node(), term(), #t{}) -> {#t{}, effects()}.
gone(From, Id, T = #t{incoming = {receiving, From, Id, _, _, _, _, _}}) ->
    {T#t{incoming = none}, []};
gone(From, Id, T = #t{streams = S}) ->
    case S of
        #{From := {Id, _, _, _, _}} -> {T#t{streams = maps:remove(From, S)}, []};
        _ -> {T, []}
    end.

%% @doc After the first part of a transfer from `From' was looked at (`T' is the state
%% after): when this copy did not take it (it is receiving or joining another, or does not
%% lack it), the sender is told, and drops the rest of it.
-spec not_taken(node(), {merge, map()}, #t{}) -> effects().
not_taken(From, {merge, #{parts := {Id, Count}}}, #t{incoming = In}) when Count > 1 ->
    case In of
        {receiving, From, Id, _, _, _, _, _} -> [];
        {joining, From, Id, _, _, _, _} -> [];
        _ -> [{send, From, {merge_part_gone, Id}}]
    end;
not_taken(_, _, _) -> [].

%% @doc The next part of transfer `Id', every part of which is here, joined; with the last,
%% the sender's delivered vector counts as delivered.
-spec join_next(term(), #t{}) -> {#t{}, effects()}.
join_next(Id, T = #t{incoming = {joining, From, Id, I, Count, VP, Parts}}) ->
    {KeyRows, Meta} = binary_to_term(maps:get(I, Parts)),         % checked on arrival
    {T1, Keys} = hm_ec_table_catch_up:join_part(KeyRows, Meta, VP, T),
    case I =:= Count of
        true ->
            hm_ec_table_catch_up:joined(From, VP, {parts, Count},
                                        T1#t{incoming = none, ahead = none});
        false ->
            {mark_ahead(Keys, VP, T1#t{incoming = {joining, From, Id, I + 1, Count, VP,
                                                   maps:remove(I, Parts)}}),
             [{continue, {join_part, Id}}]}
    end;
join_next(_, T) -> {T, []}.

%% @doc At a tick: a receiver without a part for ?STALL_TICKS acknowledges what it has
%% again (every ?STALL_TICKS), and gives the transfer up after ?ABANDON_TICKS; the sender
%% forgets the transfers not acknowledged for ?ABANDON_TICKS.
-spec tick(#t{}) -> {#t{}, effects()}.
tick(T0 = #t{ticks = N, streams = S}) ->
    T = T0#t{streams = maps:filter(fun(_, {_, _, _, _, At}) -> N - At < ?ABANDON_TICKS end,
                                   S)},
    case T#t.incoming of
        {receiving, _, _, _, _, _, At, _} when N - At >= ?ABANDON_TICKS ->
            {T#t{incoming = none}, []};
        {receiving, From, Id, Next, _, _, At, _}
          when N - At >= ?STALL_TICKS, (N - At) rem ?STALL_TICKS =:= 0 ->
            {T, [{send, From, {merge_part_ack, Id, Next - 1}}]};
        _ -> {T, []}
    end.

%% @doc Whether the effect of the operation of dot `Dot' on key `Key' is already in the key's
%% state: the key was joined from a part of a state that holds the operation, and the state's
%% last part is still to be joined.
-spec skips(term(), hm_vv:dot(), #t{}) -> boolean().
skips(_, _, #t{ahead = none}) -> false;
skips(Key, Dot, #t{ahead = {VP, Keys}}) ->
    is_map_key(Key, Keys) andalso hm_vv:contains(Dot, VP).

mark_ahead(Keys, VP, T = #t{ahead = Ahead}) ->
    Ks = case Ahead of
             none -> #{};
             {_, Ks0} -> Ks0
         end,
    %% one part's keys into the map of all of them (a merge would walk the whole map)
    T#t{ahead = {VP, lists:foldl(fun(K, Acc) -> Acc#{K => true} end, Ks, Keys)}}.

%% @doc Whether this copy is joining a state in parts: it holds keys ahead of its delivered
%% vector, and builds no state or snapshot for others.
-spec is_ahead(#t{}) -> boolean().
is_ahead(#t{incoming = {joining, _, _, _, _, _, _}}) -> true;
is_ahead(_) -> false.

%% @doc Whether a state `From' sends now is not to be joined: this copy is joining one in
%% parts, or receiving one from another member that has not stalled.
-spec receiving_other(node(), #t{}) -> boolean().
receiving_other(_, #t{incoming = {joining, _, _, _, _, _, _}}) -> true;
receiving_other(From, #t{incoming = {receiving, Src, _, _, _, _, At, _}, ticks = N}) ->
    Src =/= From andalso N - At < ?STALL_TICKS;
receiving_other(_, _) -> false.
